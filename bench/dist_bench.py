#!/usr/bin/env python3
"""Data-, pipeline-, tensor- and context-parallel training layouts on this machine: one process with 2 threads against 2
processes with 1 thread each (plain data parallelism, ZeRO stages 1-3, pipeline, tensor and context
parallelism), unillm and its peer
PyTorch (DistributedDataParallel over gloo, and ZeroRedundancyOptimizer for stage 1) on the same
model, blocks and global batch.

  bench/.venv/bin/python bench/dist_bench.py [--shape stories15M] [--steps 8]
      [--unillm build/unillm] [--torch-python /usr/bin/python3]

Per layout: the median step time after the first (warm-up), split for unillm into the time spent
waiting in collectives (the run's "communication per step" line: time inside MPI calls, i.e.
communication not hidden behind compute) and the rest (compute); the bytes each process sent per
step against the layout's formula (ring volume of the f32 trainable arena B = 4 x params:
allreduce 2(p-1)/p B; stage 1 adds an allgather (p-1)/p B; stage 2 reduce-scatters and
all-gathers, (p-1)/p B each; tensor parallelism adds 4 allreduces of the [tokens, hidden] f32
activations per layer, or with sequence parallelism 10 all-gathers / reduce-scatters, (p-1)/p each,
recompute's re-run included; context parallelism the attention's half of those, 5); scaling efficiency = tokens/s of the 2-process layout over the
1-process, 2-thread run (the same cores); unillm / PyTorch in the same layout.

Expect communication to be exposed, not overlapped: on 2 cores Open MPI progresses only inside MPI
calls, so the gradient buckets started during backward move little before the final waits.
The torch peer runs with torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR on loopback),
OPENBLAS_CORETYPE=Cooperlake (its fastest correct kernels here, bench/isa.md), OMP_NUM_THREADS=1 per process, its sgemm on
OpenBLAS (checked by train_reference_torch.py). The MPI runs use shared memory (btl self,vader).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
import train_bench as tb  # noqa: E402  (model dirs, tinyshakespeare blocks)

MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMPI_MCA_btl": "self,vader"}


def run_unillm(binary, mdir, batch, steps, np_, threads, extra, work, tag):
    out = Path(work) / f"u-{tag}"
    cfg = {
        "model_name_or_path": str(mdir), "stage": "pt", "do_train": True, "finetuning_type": "full",
        "dataset": "tinyshakespeare", "dataset_dir": str(REPO / "data"), "cutoff_len": tb.SEQ,
        "output_dir": str(out), "overwrite_output_dir": True, "logging_steps": 1, "save_strategy": "no",
        "plot_loss": False, "per_device_train_batch_size": batch // np_, "gradient_accumulation_steps": 1,
        "max_steps": steps, "learning_rate": 5.0e-5, "lr_scheduler_type": "linear", "max_grad_norm": 1.0,
        "seed": 42, "disable_shuffling": True, "disable_gradient_checkpointing": False,
    }
    cfg.update(extra)
    yml = Path(work) / f"u-{tag}.yaml"
    yml.write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in cfg.items()))
    cmd = [str(binary), "train", str(yml), "--threads", str(threads)]
    if np_ > 1:
        cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(np_)] + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **MPI_ENV), timeout=1800)
    if p.returncode != 0:
        sys.exit(f"dist_bench: unillm {tag} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    logs = [json.loads(l) for l in (out / "trainer_log.jsonl").read_text().splitlines() if l.strip()]
    tps = [l["tokens_per_s"] for l in logs if "tokens_per_s" in l]
    r = {"tokens_per_s": statistics.median(tps[1:] or tps), "losses": [l["loss"] for l in logs if "loss" in l]}
    r["params"] = int(re.search(r"training (\d+) parameters", p.stderr).group(1))
    m = re.search(r"([\d.]+) collectives, ([\d.]+) MiB sent \(ring volume\), ([\d.]+) ms waiting in them of "
                  r"([\d.]+) ms", p.stderr)
    if m:
        r.update(collectives=float(m.group(1)), mib=float(m.group(2)), wait_ms=float(m.group(3)))
    m = re.search(r"in the training steps ([\d.]+) (MiB|GiB)", p.stderr)
    if m:
        r["steps_peak_mib"] = float(m.group(1)) * (1024 if m.group(2) == "GiB" else 1)
    m = re.search(r"gradient buckets ([\d.]+) ms in flight, ([\d.]+) ms of it pending", p.stderr)
    if m:
        r.update(flight_ms=float(m.group(1)), overlap_ms=float(m.group(2)))
    return r


def run_torch(python, mdir, ids, batch, steps, np_, threads, zero1, core):
    cmd = [python, str(HERE / "train_reference_torch.py"), "--model", str(mdir), "--ids", str(ids),
           "--batch", str(batch), "--steps", str(steps), "--threads", str(threads), "--grad-ckpt"]
    if zero1:
        cmd.append("--zero1")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    if core:  # the peer at its best: OpenBLAS 0.3.21 runs SSE3 kernels on a CPU it does not know
        env.pop("OPENBLAS_L2_SIZE", None)
        env["OPENBLAS_CORETYPE"] = core
    # The environment torchrun gives its workers (torch 1.13's launcher fails under this Python),
    # on loopback.
    procs = []
    for r in range(np_):
        e = dict(env, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(np_), MASTER_ADDR="127.0.0.1",
                 MASTER_PORT="29517") if np_ > 1 else env
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e))
    outs = [p.communicate(timeout=1800) for p in procs]
    out, err = outs[0]
    lines = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    if any(p.returncode for p in procs) or not lines or "summary" not in lines[-1]:
        sys.exit(f"dist_bench: torch failed ({[p.returncode for p in procs]}):\n{out[-2000:]}\n"
                 + "\n".join(o[1][-2000:] for o in outs))
    return {"tokens_per_s": lines[-1]["summary"]["tokens_per_s"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="stories15M", choices=sorted(tb.BATCH))
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--unillm", default=str(REPO / "build/unillm"))
    ap.add_argument("--torch-python", default="/usr/bin/python3")
    ap.add_argument("--torch-core", default="Cooperlake",
                    help="OPENBLAS_CORETYPE of the PyTorch side only (bench/isa.md: its fastest correct core type "
                         "on these machines); '' leaves the environment as it is")
    ap.add_argument("--moe", action="store_true",
                    help="moe_bench.py's qwen2_moe model instead (8 experts, top-2): one process, dp2 and "
                         "expert parallelism (no PyTorch rows)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        if a.moe:
            return moe_layouts(a, Path(work))
        mdir = tb.model_dir(a.shape, HERE / "models")
        batch = tb.BATCH[a.shape]
        ids = Path(work) / "ids.npy"
        np.save(ids, tb.packed_blocks(mdir / "tokenizer.model", a.steps * batch))
        layouts = [  # (name, processes, threads each, unillm keys, torch zero1)
            ("1 process x 2 threads", 1, 2, {}, False),
            ("dp2", 2, 1, {}, False),  # torch's 25 MB buckets (stories15M: its 6 layers in one)
            # a bucket per layer, each started as backward leaves it
            ("dp2, a bucket per layer", 2, 1, {"ddp_bucket_cap_mb": 4}, None),
            ("dp2 + ZeRO-1", 2, 1, {"sharding": "stage1"}, True),
            ("dp2 + ZeRO-2", 2, 1, {"deepspeed": str(REPO / "tests/data/llamafactory_examples/deepspeed/ds_z2_config.json")}, None),
            # parameters sharded too: each layer gathered for its forward and again for its backward
            ("dp2 + ZeRO-3", 2, 1, {"deepspeed": str(REPO / "tests/data/llamafactory_examples/deepspeed/ds_z3_config.json")}, None),
            # the same global batch as 4 micro-batches through 2 stages (1F1B); no PyTorch peer here
            ("pp2 (1F1B, 4 micro-batches)", 2, 1, {"pipeline_parallel_degree": 2, "per_device_train_batch_size": batch // 4,
                                                   "gradient_accumulation_steps": 4}, None),
            # each layer's heads and MLP rows split over 2 processes (PyTorch 1.13 has no tensor parallelism)
            # (one replica: each process trains the whole global batch)
            ("tp2", 2, 1, {"tensor_parallel_degree": 2, "per_device_train_batch_size": batch}, None),
            ("tp2 + vocabulary-parallel lm_head", 2, 1, {"tensor_parallel_degree": 2, "tensor_parallel_output": True,
                                                         "per_device_train_batch_size": batch}, None),
            ("tp2 + sequence parallel", 2, 1, {"tensor_parallel_degree": 2, "sequence_parallel": True,
                                               "per_device_train_batch_size": batch}, None),
            ("tp2 + sp + vocabulary-parallel lm_head", 2, 1,
             {"tensor_parallel_degree": 2, "sequence_parallel": True, "tensor_parallel_output": True,
              "per_device_train_batch_size": batch}, None),
            # each micro-batch's tokens split over 2 processes, each attention's heads too (Ulysses's
            # layout; the MLPs, norms and loss on a process's own rows); one replica, as tp2
            ("cp2 (context parallel)", 2, 1, {"context_parallel_degree": 2, "per_device_train_batch_size": batch}, None),
        ]
        rows = []
        for name, np_, th, keys, z1 in layouts:
            u = run_unillm(a.unillm, mdir, batch, a.steps, np_, th, keys, work, re.sub(r"\W+", "_", name))
            t = (run_torch(a.torch_python, mdir, ids, batch, a.steps, np_, th, bool(z1), a.torch_core)
                 if z1 is not None else None)
            rows.append((name, np_, keys, u, t))
            print(f"{name}: unillm {u['tokens_per_s']:.0f} tok/s" + (f", torch {t['tokens_per_s']:.0f}" if t else ""),
                  flush=True)
    print(f"PyTorch side: OPENBLAS_CORETYPE={a.torch_core or '(as set)'}; unillm: the environment as it is "
          f"(OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')})")
    base_u, base_t = rows[0][3]["tokens_per_s"], rows[0][4]["tokens_per_s"]
    cfg = json.loads((mdir / "config.json").read_text())
    hidden, layers = cfg["hidden_size"], cfg["num_hidden_layers"]
    tokens = batch * tb.SEQ
    print(f"\n{a.shape}, f32 full fine-tuning, global batch {batch} x {tb.SEQ}, recompute on, {a.steps} steps "
          "(median after the first)\n")
    print("| layout | step ms | comm waiting ms | compute ms | buckets in flight ms | pending while computing ms | MiB sent / step "
          "| formula MiB | scaling eff. | torch step ms | torch scaling eff. | unillm / torch |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, np_, keys, u, t in rows:
        step = tokens / u["tokens_per_s"] * 1e3
        B = 4 * u["params"] / 1048576
        p = np_
        formula = 0.0
        if p > 1:
            formula = 2 * (p - 1) / p * B + ((p - 1) / p * B if keys.get("sharding") == "stage1" else 0)
        if "ds_z3" in str(keys.get("deepspeed", "")):  # per micro-batch: layers (and an untied embedding)
            root = cfg["vocab_size"] * hidden + hidden  # gathered twice and reduce-scattered, the root
            formula = (p - 1) / p * 4 * (3 * (u["params"] - root) + 2 * root) / 1048576  # (lm_head, norm) once each
        if keys.get("pipeline_parallel_degree"):  # + each micro-batch's activations out and gradients in
            formula += 2 * batch * tb.SEQ * hidden * 4 / 1048576
        if keys.get("tensor_parallel_degree"):  # + per layer, [tokens, hidden] f32 each: 4 allreduces
            act = tokens * hidden * 4 / 1048576  # (2 (p-1)/p each); with sequence parallelism 4 all-gathers and
            if keys.get("sequence_parallel"):    # 4 reduce-scatters ((p-1)/p each), and recompute's re-run
                formula += 10 * layers * (p - 1) / p * act  # gathers again (2 more)
                if keys.get("tensor_parallel_output"):  # the lm_head's input gathered, its gradient scattered
                    formula += 2 * (p - 1) / p * act
            else:  # (a vocabulary-parallel lm_head's input gradient: one more allreduce)
                formula += (4 * layers + (1 if keys.get("tensor_parallel_output") else 0)) * 2 * (p - 1) / p * act
        if keys.get("context_parallel_degree"):  # + per layer, the attention's SP pair: its normed rows
            act = tokens * hidden * 4 / 1048576  # all-gathered and its o_proj output reduce-scattered in
            formula += 5 * layers * (p - 1) / p * act  # forward, the reverse in backward, recompute's gather
        wait = u.get("wait_ms")
        tstep = tokens / t["tokens_per_s"] * 1e3 if t else None
        fl, ov = u.get("flight_ms"), u.get("overlap_ms")
        t_eff = f"{t['tokens_per_s'] / base_t:.2f}" if t else "-"
        ratio = f"{u['tokens_per_s'] / t['tokens_per_s']:.2f}x" if t else "-"
        print(f"| {name} | {step:.0f} | {wait if wait is not None else 0:.0f} | "
              f"{step - (wait or 0):.0f} | {f'{fl:.0f}' if fl is not None else '-'} | "
              f"{f'{ov:.0f}' if ov is not None else '-'} | {u.get('mib', 0):.2f} | {formula:.2f} | "
              f"{u['tokens_per_s'] / base_u:.2f} | {f'{tstep:.0f}' if t else '-'} | "
              f"{t_eff} | {ratio} |")
    print("\nallocator peak inside the training steps (per process; evaluation and saving excluded):")
    for name, _, _, u, _ in rows:
        if "steps_peak_mib" in u:
            print(f"  {name}: {u['steps_peak_mib']:.0f} MiB")
    print("\nloss at each step (same data, same global batch):")
    for name, _, _, u, _ in rows:
        print(f"  {name}: {u['losses']}")


def moe_layouts(a, work):
    """Expert parallelism's rows on moe_bench.py's model: each sparse layer's experts split over the
    2 processes, every token all-gathered to them and the experts' sums reduce-scattered back."""
    import moe_bench  # noqa: E402
    mdir = moe_bench.make_model(a.unillm, work)
    batch = moe_bench.BATCH
    layouts = [("1 process x 2 threads", 1, 2, {}), ("dp2", 2, 1, {}),
               ("dp2 + expert parallel 2", 2, 1, {"expert_parallel_degree": 2})]
    rows = []
    for name, np_, th, keys in layouts:
        keys = dict(keys, disable_gradient_checkpointing=True)  # as moe_bench trains it
        u = run_unillm(a.unillm, mdir, batch, a.steps, np_, th, keys, work, re.sub(r"\W+", "_", name))
        rows.append((name, np_, u))
        print(f"{name}: unillm {u['tokens_per_s']:.0f} tok/s", flush=True)
    base = rows[0][2]["tokens_per_s"]
    tokens = batch * tb.SEQ
    print(f"\nqwen2_moe (moe_bench.py), f32 full fine-tuning, global batch {batch} x {tb.SEQ}, recompute off, "
          f"{a.steps} steps (median after the first)\n")
    print("| layout | step ms | comm waiting ms | compute ms | MiB sent / step | arena allreduce MiB | scaling eff. "
          "| steps' allocator peak MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for name, np_, u in rows:
        step = tokens / u["tokens_per_s"] * 1e3
        wait = u.get("wait_ms") or 0
        arena = 2 * (np_ - 1) / np_ * 4 * u["params"] / 1048576
        print(f"| {name} | {step:.0f} | {wait:.0f} | {step - wait:.0f} | {u.get('mib', 0):.2f} | {arena:.2f} | "
              f"{u['tokens_per_s'] / base:.2f} | {u.get('steps_peak_mib', 0):.0f} |")
    print("\nloss at each step (same data, same global batch):")
    for name, _, u in rows:
        print(f"  {name}: {u['losses']}")


if __name__ == "__main__":
    main()
