"""Your own model trained with uneven local batches under torchrun, hetsim's plan (or a policy) applied
across the ranks with validation.uneven (validation/README.md, "Using the trainer in your own script")::

    python -m validation profile --workload examples/train_your_model.py:WORKLOAD --slowdown 1,2 --out prof
    python -m hetsim plan prof/scenario.toml --wait-for-all --out plan.json
    torchrun --nproc-per-node 2 --master-addr 127.0.0.1 examples/train_your_model.py \\
        --plan plan.json --slowdown 1,2 --out run
    python -m validation compare run

On GPUs (one rank per GPU, NCCL): profile with ``--devices cuda:0,cuda:1``, leave ``--slowdown``
out and train with ``--device cuda``.
"""

import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch import nn

from hetsim.policies import Policy
from validation import uneven
from validation.workloads.base import Workload
from validation.workloads.sklearn_data import load_digits


def make_model() -> nn.Module:  # your model: a small CNN on 8x8 images (no BatchNorm: it would depend on the split)
    convs = nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU()
    return nn.Sequential(nn.Unflatten(1, (1, 8, 8)), *convs, nn.Flatten(), nn.Linear(64 * 8 * 8, 10))


X, Y = (torch.tensor(a) for a in load_digits())  # scikit-learn's 8x8 digits: shipped, no download
ORDER = torch.randperm(len(Y), generator=torch.Generator().manual_seed(0))  # 1437 to train, 360 held out
(X, TEST_X), (Y, TEST_Y) = (X[ORDER] / 16.0).float().split([1437, 360]), Y[ORDER].split([1437, 360])
WORKLOAD = Workload.from_parts("your-cnn", make_model, (X, Y), (TEST_X, TEST_Y), nn.functional.cross_entropy)


def train(args: argparse.Namespace, device: torch.device, plan: uneven.PlanChoice | None, policy: Policy) -> int:
    world = dist.get_world_size()
    name, batch = (plan.policy, plan.global_batch) if plan else (args.policy, args.global_batch)
    torch.manual_seed(args.seed)  # the same weights on every rank (DDP broadcasts rank 0's anyway)
    model = make_model().to(device)
    x, y, test_x, test_y = (t.to(device) for t in (X, Y, TEST_X, TEST_Y))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    delay = uneven.slowdown_delay(args.slowdown)  # an emulated slower device (None at 1: nothing to emulate)
    stepper = uneven.UnevenStep(model, optimizer, device, comm="ddp", delay=delay)
    meta = uneven.script_meta(world_size=world, global_batch=batch, epochs=args.epochs, policies=[name], model=model,
        steps_per_epoch=uneven.steps_per_epoch(len(Y), batch), n_train=len(Y), n_test=len(TEST_Y), seed=args.seed,
        backend=dist.get_backend(), devices=[args.device] * world, workload=__file__, comm="ddp", plan=plan,
        slowdown=args.slowdowns, extra={"lr": args.lr})  # fmt: skip
    writer = uneven.open_run(args.out, meta)  # rank 0 writes the run folder

    def loss_of(net: nn.Module, idx: torch.Tensor) -> torch.Tensor:  # idx: this rank's samples, on its device
        return nn.functional.cross_entropy(net(x[idx]), y[idx])  # the mean over this rank's samples

    def evaluate() -> tuple[float, float]:
        with torch.no_grad():
            out = model(test_x)
        right = int((out.argmax(1) == test_y).sum())  # counted exactly: 342 of 360 is 0.95, not float32's 0.9499999
        return float(nn.functional.cross_entropy(out, test_y)), right / len(test_y)

    with uneven.marked_end(writer):  # stopped (Ctrl-C, torchrun's SIGTERM) or failed: meta.json says so
        # every rank at several batches: the calibration; the split's broadcasts on the stepper's device (NCCL: GPU)
        probe = uneven.Controller(uneven.PROBE, None, batch, writer, comm_device=stepper.comm_device)
        uneven.probe_rounds(probe, stepper, loss_of, seed=args.seed, epoch=0, n_samples=len(Y),
                            rounds=args.probe_repeats)  # fmt: skip
        ctrl = uneven.Controller(name, policy, batch, writer, comm_device=stepper.comm_device,
                                 hints=lambda: uneven.probe_hints(writer))  # fmt: skip
        for epoch in range(args.epochs):
            results = uneven.train_epoch(ctrl, stepper, loss_of, seed=args.seed, epoch=epoch, n_samples=len(Y))
            writer.add_epoch(uneven.epoch_row(ctrl, epoch, results, evaluate))
            writer.flush()
    for entry in writer.finish([name])["policies"]:  # rank 0's summary (empty elsewhere); flushed: os._exit below
        print(f"{name}: {entry['steps']} steps, mean {1e3 * entry['mean_step_s']:.2f} ms, final split "
              f"{'/'.join(map(str, entry['final_batches']))}, {uneven.held_out(entry)}",
              flush=True)  # fmt: skip
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", help="plan.json from `python -m hetsim plan SCENARIO --wait-for-all --out plan.json`")
    parser.add_argument("--policy", help="instead of --plan: a hetsim barrier policy (default dynamic)")
    parser.add_argument("--global-batch", type=int, help="with --policy (default 128); a plan brings its own")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="cpu (gloo), or cuda (NCCL)")
    parser.add_argument("--epochs", type=int, default=3), parser.add_argument("--probe-repeats", type=int, default=2)
    parser.add_argument("--lr", type=float, help="default 0.05; with a plan: the efficiency's own, or this, scaled")
    parser.add_argument("--seed", type=int, default=0), parser.add_argument("--slowdown", help="slower ranks: 1,2, 1=2")
    parser.add_argument("--out", required=True, help="the run folder, new or empty (rank 0 writes it)")
    args = parser.parse_args(argv)
    if args.plan is not None and (args.policy or args.global_batch):
        parser.error("--plan brings its policy and global batch: give --policy and --global-batch only without it")
    args.policy, args.global_batch = args.policy or "dynamic", args.global_batch or 128
    rank, world, cuda = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1")), args.device == "cuda"
    try:  # what a user can get wrong, refused before the ranks meet: one line, exit status 2
        plan = uneven.load_plan(args.plan, world) if args.plan is not None else None  # a plan for another cluster
        policy = plan.make() if plan else uneven.barrier_policy(args.policy)  # async, backup, ksync, goodput
        warning = plan.lr_warning(args.lr) if plan else None  # said once every input is taken
        args.lr = plan.lr(args.lr, 0.05) if plan else 0.05 if args.lr is None else args.lr  # a plan's rule applied
        args.slowdowns = uneven.slowdown_factors(args.slowdown, world)  # every rank's, for the run folder
        args.slowdown = args.slowdowns.get(rank, 1.0)
        uneven.check_model(make_model())  # no BatchNorm: it would make a rank's gradient depend on the split
        if rank == 0:  # the rank that writes the run folder: refused if it holds files
            uneven.check_run_folder(args.out, "--out")
        device = uneven.torch_device(f"cuda:{os.environ.get('LOCAL_RANK', '0')}" if cuda else "cpu", "--device")
    except ValueError as exc:
        return uneven.refuse(exc, rank, "train_your_model")
    if warning and rank == 0:
        print(f"train_your_model: warning: {warning}", file=sys.stderr)
    if os.environ.get("LOCAL_WORLD_SIZE", "1") == os.environ.get("WORLD_SIZE", "1"):  # one machine: loopback
        os.environ.update({k: v for k, v in uneven.loopback_environment().items() if k not in os.environ})
    # each rank on its own GPU, cuda:LOCAL_RANK, under NCCL, or on the CPU under gloo; env://: torchrun's rendezvous
    if cuda:
        torch.cuda.set_device(device)  # the current device: what NCCL's collectives and all_gather_object use
    dist.init_process_group("nccl" if cuda else "gloo", device_id=device if cuda else None)
    try:
        return train(args, device, plan, policy)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    os._exit(main())  # as validation.train ends: gloo's threads can abort the interpreter's own teardown
