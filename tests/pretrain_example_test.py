"""Issue 71, part 3: examples/pretrain_gpt.py, a pretraining run end to end, against torch.

The example makes byte tokens of the standard library's sources, exports examples/gpt.py's decoder
with its loss by torch's default exporter, cuts it into 2 stages and trains them on 2 ranks under
1f1b with AdamW, warmup and cosine decay, gradient clipping and a held-out loss every 100 steps.
torch.optim trains the same model, from the same initialization, in one process on the windows the
run's log names (dropout is off on both sides): the first 20 losses agree to 5 significant digits,
and the held-out loss after 200 steps, computed by torch in eval mode on the held-out windows the log
names, is within 1% of cleave's. At CI's size (width 64, 2 layers, sequences of 64 bytes, batches of
8) the run takes well under a minute."""
import json
import os
import subprocess
import sys

import numpy as np
import torch

from testlib import CLEAVE, EXAMPLES, TempDirTest, free_port, main

sys.path.insert(0, EXAMPLES)
from gpt import GPT, GPTConfig, windows  # noqa: E402

torch.set_num_threads(1)
SIZE = dict(width=64, layers=2, heads=2, seq=64)
BATCH, MICROBATCHES, STEPS, EVAL_EVERY, LR, CLIP = 8, 2, 200, 100, 1e-3, 1.0


class PretrainExample(TempDirTest):
    def test_the_example_trains_as_torch_does(self):
        out = self.path("pretrain")
        flags = [f"--{name}={value}" for name, value in SIZE.items()]
        argv = [sys.executable, os.path.join(EXAMPLES, "pretrain_gpt.py"), "--cleave", CLEAVE, "--out", out,
                "--megabytes", "2", *flags, "--batch", str(BATCH), "--microbatches", str(MICROBATCHES),
                "--steps", str(STEPS), "--eval-every", str(EVAL_EVERY), "--lr", str(LR), "--master-port", str(free_port())]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
        self.assertIn("held-out loss", proc.stdout)
        with open(os.path.join(out, "run.jsonl")) as f:
            log = [json.loads(line) for line in f]
        self.assertEqual(len(log), STEPS)
        self.assertTrue(os.path.isfile(os.path.join(out, "trained", "plan.json")))
        self.assertTrue(os.path.isfile(os.path.join(out, "trained", "trained.onnx")))
        train_ids = np.fromfile(os.path.join(out, "train.bin"), dtype=np.uint16)
        held_ids = np.fromfile(os.path.join(out, "val.bin"), dtype=np.uint16)

        torch.manual_seed(0)
        module = GPT(GPTConfig(vocab=256, **SIZE)).train()
        optimizer = torch.optim.AdamW(module.parameters(), lr=LR)
        warmup = max(STEPS // 20, 1)
        schedule = torch.optim.lr_scheduler.SequentialLR(optimizer, [
            torch.optim.lr_scheduler.LinearLR(optimizer, 1 / (warmup + 1), 1.0, warmup),
            torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, STEPS - warmup)], milestones=[warmup])
        losses = []
        for line in log:
            tokens, targets = windows(train_ids, line["window_starts"], SIZE["seq"])
            optimizer.zero_grad()
            loss = module(tokens, targets)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(module.parameters(), CLIP)
            optimizer.step()
            schedule.step()
            losses.append(loss.item())
        got = [line["loss"] for line in log]
        np.testing.assert_allclose(got[:20], losses[:20], rtol=5e-5, err_msg="the first 20 losses")
        last = log[-1]
        module.eval()
        with torch.no_grad():
            want = module(*windows(held_ids, last["eval_window_starts"], SIZE["seq"])).item()
        self.assertAlmostEqual(last["eval_loss"], want, delta=0.01 * want, msg="held-out loss after the last step")
        worst = max(abs(a - b) / abs(b) for a, b in zip(got, losses))
        print(f"first 20 losses within {max(abs(a - b) / abs(b) for a, b in zip(got[:20], losses[:20])):.2e}, all "
              f"{STEPS} within {worst:.2e}; held-out after {STEPS}: cleave {last['eval_loss']:.6f}, torch {want:.6f}",
              file=sys.stderr)
        self.assertLess(last["eval_loss"], log[0]["loss"] - 1.0)  # it learned: bytes are far from uniform


if __name__ == "__main__":
    main()
