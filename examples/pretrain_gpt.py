"""Pretrain a small GPT-style decoder with cleave, end to end, from text already on this machine.

    .venv/bin/python examples/pretrain_gpt.py --cleave build/release/cleave --out pretrain/

1. Byte-level tokens (ids 0-255) from the Python standard library's sources: train.bin and val.bin,
   uint16 as nanoGPT writes them (the last tenth of the text is held out).
2. examples/gpt.py's decoder (pre-norm, causal attention, GELU MLP, tied embedding) exported with
   its loss by torch's default ONNX exporter.
3. `cleave pipeline` cuts it into 2 stages; `cleave launch --nproc 2` trains them under 1f1b with
   AdamW, warmup and cosine decay, gradient clipping and a held-out loss every --eval-every steps,
   logging every step to run.jsonl.

Every command is printed before it runs. Sizes are flags; the defaults take a few minutes on 2 cores.
"""
import argparse
import glob
import os
import subprocess
import sys
import sysconfig

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt import GPT, GPTConfig, export  # noqa: E402


def byte_tokens(megabytes):
    """The bytes of the standard library's .py files, in sorted order, up to `megabytes`."""
    chunks, size = [], 0
    for path in sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "**", "*.py"), recursive=True)):
        with open(path, "rb") as f:
            data = f.read()
        chunks.append(data)
        size += len(data)
        if size >= megabytes << 20:
            break
    return np.frombuffer(b"".join(chunks)[:megabytes << 20], dtype=np.uint8).astype(np.uint16)


def command(*args):
    args = [str(a) for a in args]
    print("$", " ".join(args), flush=True)
    subprocess.run(args, check=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cleave", default="cleave", help="the cleave binary")
    parser.add_argument("--out", default="pretrain", help="folder for the tokens, the model, the plan and the run")
    parser.add_argument("--megabytes", type=int, default=8, help="text to tokenize")
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--master-port", type=int, default=29500, help="the ranks' rendezvous port (cleave launch's)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    path = lambda name: os.path.join(args.out, name)

    ids = byte_tokens(args.megabytes)
    split = len(ids) * 9 // 10
    ids[:split].tofile(path("train.bin"))
    ids[split:].tofile(path("val.bin"))
    print(f"{split} training and {len(ids) - split} held-out byte tokens from the standard library", flush=True)

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab=256, width=args.width, heads=args.heads, layers=args.layers, seq=args.seq)).train()
    print(f"GPT: {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters", flush=True)
    export(model, path("gpt.onnx"))

    command(args.cleave, "pipeline", path("gpt.onnx"), "--stages", 2, "--loss", "loss", "-o", path("stages"))
    command(args.cleave, "launch", "--nproc", 2, "--master-port", args.master_port, "--", args.cleave, "train",
            path("stages"), "--model", path("gpt.onnx"), "--data", path("train.bin"), "--tokens", "uint16",
            "--batch", args.batch, "--microbatches", args.microbatches, "--schedule", "1f1b",
            "--steps", args.steps, "--optimizer", "adamw", "--lr", args.lr, "--warmup", max(args.steps // 20, 1),
            "--lr-schedule", "cosine", "--clip-grad-norm", 1.0,
            "--eval-data", path("val.bin"), "--eval-every", args.eval_every, "--eval-batches", 4,
            "--log", path("run.jsonl"), "-o", path("trained"))


if __name__ == "__main__":
    main()
