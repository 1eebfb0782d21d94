"""Learning-rate multipliers from transformers' own schedulers, for tests/train/lr_schedule_test.cpp.

    .venv-ref/bin/python tools/make_lr_schedule_goldens.py

Runs transformers.get_scheduler (the reference venv's transformers 4.46) over a one-parameter
optimizer with lr 1 and prints lr at steps 0..N-1 for: cosine with num_cycles 0.5 / 1.0 / 1.5,
cosine_with_min_lr with num_cycles 1.0, and warmup_stable_decay (4.46's get_wsd_schedule: linear
warm-up from 0, cosine decay; equal to current transformers' when min_lr_ratio is 0).
Also cosine_with_restarts, polynomial and inverse_sqrt.
"""
import torch
from transformers import get_scheduler


def lrs(name, steps, warmup, total, **kwargs):
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = get_scheduler(name, opt, num_warmup_steps=warmup, num_training_steps=total, scheduler_specific_kwargs=kwargs)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def emit(label, values):
    print(f"// {label}")
    print("{" + ", ".join(f"{v:.17g}" for v in values) + "},")


for nc in (0.5, 1.0, 1.5):
    emit(f"cosine warmup 3 total 20 num_cycles {nc}", lrs("cosine", 20, 3, 20, num_cycles=nc))
emit("cosine_with_min_lr warmup 3 total 20 num_cycles 1.0 min_lr_rate 0.1",
     lrs("cosine_with_min_lr", 20, 3, 20, num_cycles=1.0, min_lr_rate=0.1))
emit("warmup_stable_decay warmup 2 stable 5 decay 8, 20 steps",
     lrs("warmup_stable_decay", 20, 2, 20, num_stable_steps=5, num_decay_steps=8))
emit("warmup_stable_decay warmup 2 stable 5 decay 8 num_cycles 1.0, 20 steps",
     lrs("warmup_stable_decay", 20, 2, 20, num_stable_steps=5, num_decay_steps=8, num_cycles=1.0))
emit("cosine_with_restarts warmup 3 total 20 num_cycles 2",
     lrs("cosine_with_restarts", 20, 3, 20, num_cycles=2))
emit("polynomial warmup 3 total 20 lr_end 0.1 power 2.0, 22 steps (lr_init 1)",
     lrs("polynomial", 22, 3, 20, lr_end=0.1, power=2.0))
emit("inverse_sqrt warmup 4, 12 steps", lrs("inverse_sqrt", 12, 4, 20))
emit("inverse_sqrt no warmup, 3 steps", lrs("inverse_sqrt", 3, 0, 20))


def plateau(metrics, **kwargs):
    """torch's ReduceLROnPlateau (what transformers' reduce_lr_on_plateau builds) fed `metrics`:
    the lr after each step, from lr 1."""
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = get_scheduler("reduce_lr_on_plateau", opt, scheduler_specific_kwargs=kwargs)
    out = []
    for m in metrics:
        sched.step(m)
        out.append(opt.param_groups[0]["lr"])
    return out


METRICS = [5.0, 4.0, 4.0, 3.9999, 4.1, 3.0, 3.0, 3.0, 3.0, 2.0, 2.5, 2.5, 2.5, 2.5]
print("// metrics " + ", ".join(str(m) for m in METRICS))
emit("plateau patience 1 factor 0.5", plateau(METRICS, patience=1, factor=0.5))
emit("plateau patience 0 factor 0.5 cooldown 2 min_lr 0.1", plateau(METRICS, patience=0, factor=0.5, cooldown=2, min_lr=0.1))
emit("plateau mode max patience 1 threshold 0.1 threshold_mode abs", plateau(METRICS, mode="max", patience=1, threshold=0.1, threshold_mode="abs"))
