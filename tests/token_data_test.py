"""`cleave train` on token streams (issue 71, part 2): a flat binary of uint16 or uint32 ids
(nanoGPT's train.bin) or a folder of .npy shards, memory-mapped and never read whole.

A GPT-style decoder (examples/gpt.py) exported with torch 2.x's default exporter trains on windows
of the stream: the losses and held-out losses equal torch's on the windows `--log` names (torch.optim
AdamW with clipping, the held-out loss in eval mode under no_grad); the samplers read what they
promise (random windows by seed alone, epochs visiting every window once); replicas read disjoint
shares of the same rows one process reads; a .bin, a uint32 file and .npy shards of the same ids
train the same model byte for byte; a run resumed from a checkpoint reads the rows the uninterrupted
run would (byte-equal model) and refuses other data; a 20 GB stream costs no more anonymous memory
than a 20 MB one; bad token data fails in one line."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import torch

from testlib import CLEAVE, EXAMPLES, TempDirTest, launch, main, run

sys.path.insert(0, EXAMPLES)
from gpt import GPT, GPTConfig, export, windows  # noqa: E402

torch.set_num_threads(1)
CONFIG = GPTConfig(vocab=64, width=32, heads=2, layers=2, seq=16)
BATCH, STEPS, LR, CLIP = 4, 6, 3e-3, 0.5
EVAL_WINDOWS = 8  # the held-out stream's windows: 2 batches, every one read once (epochs)


def make_model():
    torch.manual_seed(0)
    return GPT(CONFIG).train()


class TokenStreams(TempDirTest):
    @classmethod
    def setUpClass(cls):
        cls.shared = tempfile.mkdtemp(prefix="cleave_test_")
        cls.model = os.path.join(cls.shared, "gpt.onnx")
        export(make_model(), cls.model)
        rng = np.random.default_rng(3)
        cls.ids = rng.integers(0, CONFIG.vocab, 6000).astype(np.uint16)
        cls.train_bin = os.path.join(cls.shared, "train.bin")
        cls.ids.tofile(cls.train_bin)
        cls.held = rng.integers(0, CONFIG.vocab, EVAL_WINDOWS * CONFIG.seq + 1).astype(np.uint16)
        cls.val_bin = os.path.join(cls.shared, "val.bin")
        cls.held.tofile(cls.val_bin)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.shared)

    def train(self, *flags, data=None, model=None, ranks=1, expect=0):
        args = ["train", model or self.model, "--data", data or self.train_bin, "--tokens", "uint16", "--batch", BATCH,
                "--optimizer", "adamw", "--lr", LR, "--json", *flags]
        code, stdout, err = launch(ranks, "cleave", *args) if ranks > 1 else run(*args)
        self.assertEqual(code, expect, err)
        lines = [json.loads(line.split("] ", 1)[-1]) for line in stdout.splitlines() if '"step"' in line]
        return lines, err

    def log(self, path):
        with open(path) as f:
            return [json.loads(line) for line in f]

    def test_losses_and_held_out_loss_equal_torchs_on_the_logged_windows(self):
        log = self.path("log.jsonl")
        lines, _ = self.train("--steps", STEPS, "--clip-grad-norm", CLIP, "--sampling", "epochs", "--log", log,
                              "--eval-data", self.val_bin, "--eval-every", 3, "--eval-batches", EVAL_WINDOWS // BATCH,
                              "--microbatches", 2)
        logged = self.log(log)
        self.assertEqual([line["step"] for line in logged], list(range(1, STEPS + 1)))
        module = make_model()
        optimizer = torch.optim.AdamW(module.parameters(), lr=LR)
        held = windows(self.held, [w * CONFIG.seq for w in range(EVAL_WINDOWS)], CONFIG.seq)
        for step, line in enumerate(logged):
            tokens, targets = windows(self.ids, line["window_starts"], CONFIG.seq)
            optimizer.zero_grad()
            loss = module(tokens, targets)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(module.parameters(), CLIP)
            optimizer.step()
            self.assertAlmostEqual(lines[step]["loss"], loss.item(), delta=1e-5 * abs(loss.item()), msg=f"step {step + 1}")
            self.assertEqual(line["loss"], lines[step]["loss"])
            if (step + 1) % 3 == 0:
                module.eval()
                with torch.no_grad():
                    want = module(*held).item()
                module.train()
                self.assertAlmostEqual(lines[step]["eval_loss"], want, delta=1e-5 * want, msg=f"held-out, step {step + 1}")
            else:
                self.assertNotIn("eval_loss", lines[step])
        self.assertNotIn("tokens_per_s", lines[-1])  # --json repeats byte for byte; --log has the rate
        self.assertGreater(logged[-1]["tokens_per_s"], 0)
        self.assertGreater(logged[-1]["flops_per_s"], 0)  # the products' shapes are static but for the rows

    def test_epochs_read_every_window_once_per_epoch(self):
        log = self.path("log.jsonl")
        windows_count = (len(self.ids) - 1) // CONFIG.seq  # 374
        steps = 2 * windows_count // BATCH + 1
        self.train("--steps", steps, "--sampling", "epochs", "--log", log)
        starts = [s for line in self.log(log) for s in line["window_starts"]]
        every = list(range(0, windows_count * CONFIG.seq, CONFIG.seq))
        first, second = starts[:windows_count], starts[windows_count:2 * windows_count]
        self.assertEqual(sorted(first), every)
        self.assertEqual(sorted(second), every)
        self.assertNotEqual(first, second)  # each epoch shuffled anew
        self.assertNotEqual(first, every)

    def test_random_windows_follow_the_seed_and_replicas_share_the_rows(self):
        one, seeded = self.path("one.jsonl"), self.path("seeded.jsonl")
        ones, _ = self.train("--steps", 3, "--log", one)
        self.train("--steps", 3, "--seed", 9, "--log", seeded)
        starts = [line["window_starts"] for line in self.log(one)]
        self.assertNotEqual(starts, [line["window_starts"] for line in self.log(seeded)])
        self.assertTrue(all(0 <= s <= len(self.ids) - CONFIG.seq - 1 for row in starts for s in row))
        # Two replicas of a 2-stage pipeline on 4 ranks read, together, the rows one process reads.
        plan = self.path("plan")
        code, _, err = run("pipeline", self.model, "--stages", 2, "-o", plan)
        self.assertEqual(code, 0, err)
        both, _ = self.train("--steps", 3, "--log", self.path("both.jsonl"), "--pipeline-ranks", 2,
                             "--schedule", "1f1b", "--microbatches", 1, model=plan, ranks=4)
        self.assertEqual([line["window_starts"] for line in self.log(self.path("both.jsonl"))], starts)
        np.testing.assert_allclose([line["loss"] for line in both], [line["loss"] for line in ones], rtol=1e-5)

    def test_shards_and_uint32_train_the_same_model_as_the_bin(self):
        self.train("--steps", 3, "-o", self.path("bin"))
        shards = self.path("shards")
        os.mkdir(shards)
        for k, part in enumerate(np.array_split(self.ids, [1000, 3500])):  # windows cross shard ends
            np.save(os.path.join(shards, f"part_{k:02d}.npy"), part.astype(np.int32 if k == 1 else np.uint16))
        wide = self.path("train32.bin")
        self.ids.astype(np.uint32).tofile(wide)
        code, _, err = run("train", self.model, "--data", shards, "--tokens", "npy", "--batch", BATCH, "--steps", 3,
                           "--optimizer", "adamw", "--lr", LR, "-o", self.path("npy"))
        self.assertEqual(code, 0, err)
        code, _, err = run("train", self.model, "--data", wide, "--tokens", "uint32", "--batch", BATCH, "--steps", 3,
                           "--optimizer", "adamw", "--lr", LR, "-o", self.path("u32"))
        self.assertEqual(code, 0, err)
        want = read_bytes(self.path("bin/trained.onnx"))
        for other in ("npy", "u32"):
            self.assertEqual(read_bytes(self.path(f"{other}/trained.onnx")), want, other)

    def test_a_resumed_run_reads_the_rows_the_uninterrupted_run_would(self):
        self.train("--steps", 5, "-o", self.path("whole"))
        checkpoints = self.path("ck")
        self.train("--steps", 5, "--checkpoint-dir", checkpoints, "--stop-after", 2)
        manifest = json.loads(read_bytes(os.path.join(checkpoints, "step-00000002", "manifest.json")))
        self.assertEqual(manifest["data_rows_read"], 2 * BATCH)
        self.assertIn("random windows of 16 ids, seed 0", manifest["data"])
        self.train("--steps", 5, "--resume", checkpoints, "-o", self.path("resumed"))
        self.assertEqual(read_bytes(self.path("resumed/trained.onnx")), read_bytes(self.path("whole/trained.onnx")))
        # Resuming on another sampler would read other rows: refused, naming the data.
        code, _, err = run("train", self.model, "--data", self.train_bin, "--tokens", "uint16", "--batch", BATCH,
                           "--optimizer", "adamw", "--lr", LR, "--steps", 5, "--resume", checkpoints,
                           "--sampling", "epochs")
        self.assertOneLineError(code, err, "was written with data tokens: 6000 uint16 ids, random windows")

    def test_bad_token_data_fails_in_one_line(self):
        high = self.path("high.bin")
        bad = self.ids.copy()
        bad[2500:] = CONFIG.vocab  # every window from here on reads it
        bad.tofile(high)
        code, _, err = run("train", self.model, "--data", high, "--tokens", "uint16", "--batch", BATCH, "--steps", 30)
        self.assertOneLineError(code, err, "token 64 at id", "at or above the model's vocabulary of 64")
        odd = self.path("odd.bin")
        with open(odd, "wb") as f:
            f.write(b"\x01\x00\x02")
        code, _, err = run("train", self.model, "--data", odd, "--tokens", "uint16", "--batch", BATCH)
        self.assertOneLineError(code, err, "3 bytes is not a whole number of uint16 ids")
        short = self.path("short.bin")
        self.ids[:10].tofile(short)
        code, _, err = run("train", self.model, "--data", short, "--tokens", "uint16", "--batch", BATCH)
        self.assertOneLineError(code, err, "holds 10 ids: fewer than one window of 16")
        code, _, err = run("train", self.model, "--data", self.train_bin, "--batch", BATCH)
        self.assertOneLineError(code, err, "a token file: say its ids' type with --tokens")
        code, _, err = run("train", self.model, "--data", self.train_bin, "--tokens", "uint16", "--batch", BATCH,
                           "--token-inputs", "ids")
        self.assertOneLineError(code, err, "--token-inputs: the model has no input 'ids'")
        code, _, err = run("train", self.model, "--data", self.train_bin, "--batch", BATCH, "--seq-len", 16)
        self.assertOneLineError(code, err, "--seq-len is for token data", exit_code=2)
        code, _, err = run("train", self.model, "--data", self.train_bin, "--tokens", "uint16", "--batch", BATCH,
                           "--eval-every", 2)
        self.assertOneLineError(code, err, "--eval-every needs held-out data", exit_code=2)
        code, _, err = run("train", self.model, "--data", self.train_bin, "--tokens", "uint16", "--batch", BATCH,
                           "--log", self.train_bin)
        self.assertOneLineError(code, err, "would overwrite the input", exit_code=2)
        self.assertEqual(os.path.getsize(self.train_bin), 2 * len(self.ids))

    def test_a_20_gb_stream_costs_no_more_memory_than_a_20_mb_one(self):
        small, large = self.path("small.bin"), self.path("large.bin")
        for path, size in ((small, 20 << 20), (large, 20 << 30)):
            with open(path, "wb") as f:  # sparse: ids of 0, read from holes
                f.truncate(size)
        peaks = {}
        for path in (small, large, small, large):
            peak = peak_anonymous_memory([CLEAVE, "train", self.model, "--data", path, "--tokens", "uint16",
                                          "--batch", 8, "--steps", 20, "--lr", 1e-4])
            peaks[path] = min(peaks.get(path, peak), peak)
        self.assertLessEqual(peaks[large], 1.1 * peaks[small], f"peak anonymous KiB: {peaks}")


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def peak_anonymous_memory(argv):
    """The largest RssAnon (KiB) of the process, polled every 2 ms until it exits with 0."""
    process = subprocess.Popen(list(map(str, argv)), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = [0]

    def poll():
        status = f"/proc/{process.pid}/status"
        while process.poll() is None:
            try:
                with open(status) as f:
                    for line in f:
                        if line.startswith("RssAnon:"):
                            peak[0] = max(peak[0], int(line.split()[1]))
            except OSError:
                return
            time.sleep(0.002)

    watcher = threading.Thread(target=poll)
    watcher.start()
    _, err = process.communicate()
    watcher.join()
    assert process.returncode == 0, err.decode()
    return peak[0]


if __name__ == "__main__":
    main()
