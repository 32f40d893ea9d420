"""Checkpoints and exact resume (issue 46): a run stopped at step k (`--stop-after`, or a rank
killed under `cleave launch --max-restarts`) and resumed gives the same losses and the same trained
files, byte for byte, as the run that never stopped: one process on a whole model (SGD with
momentum and AdamW, with a cosine schedule and clipping, whose state all has to come back), and a
4-stage plan on 2 and 4 ranks under every schedule, and resumed on another rank count
(resharded). Checkpoints of another model, plan, batch, optimizer or schedule are refused in one
line naming what differs; a damaged one is refused;
only the last complete checkpoint is kept and nothing else in the folder is touched."""
import json
import os
import shutil
import signal
import subprocess
import time

import numpy as np
import torch

from testlib import CLEAVE, TempDirTest, free_port, launch, main, run

os.environ["OMP_NUM_THREADS"] = "1"
torch.set_num_threads(1)

STEPS, BATCH = 6, 8
COMMON = ["--microbatches", 4, "--lr-schedule", "cosine", "--warmup", 1,
          "--clip-grad-norm", 0.5, "--json"]
OPTIMIZERS = {"sgd": ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9", "--weight-decay", "0.01"],
              "adamw": ["--optimizer", "adamw", "--lr", "0.01"]}


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc0, self.fc1 = torch.nn.Linear(6, 16), torch.nn.Linear(16, 16)
        self.fc2, self.fc3 = torch.nn.Linear(16, 16), torch.nn.Linear(16, 4)

    def forward(self, x, target):
        h = torch.relu(self.fc1(torch.relu(self.fc0(x))))
        return torch.nn.functional.cross_entropy(self.fc3(torch.tanh(self.fc2(h))), target)


def losses_of(stdout):
    """Each step's line, without the run's own facts (what trains: with the first line printed)."""
    lines = [json.loads(line.split("] ", 1)[-1]) for line in stdout.splitlines()]
    return [{key: value for key, value in line.items() if key != "trainable"} for line in lines]


def files_of(folder):
    """Every file's bytes, by name (a trained model, or a trained plan's stages)."""
    contents = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".onnx"):
            with open(os.path.join(folder, name), "rb") as f:
                contents[name] = f.read()
    return contents


class Checkpoints(TempDirTest):
    def setUp(self):
        super().setUp()
        torch.manual_seed(0)
        self.model = self.path("mlp.onnx")
        torch.onnx.export(Mlp(), (torch.randn(BATCH, 6), torch.zeros(BATCH, dtype=torch.long)), self.model,
                          input_names=["x", "target"], output_names=["loss"], opset_version=13,
                          do_constant_folding=False, dynamic_axes={"x": {0: "n"}, "target": {0: "n"}}, dynamo=False)
        g = torch.Generator().manual_seed(1)
        np.savez(self.path("data.npz"), x=torch.randn(20, 6, generator=g).numpy(),
                 target=torch.randint(0, 4, (20,), generator=g).numpy())
        self.plan = self.path("plan")
        run("pipeline", self.model, "--stages", 4, "-o", self.plan, check=True)

    def train(self, target, ranks, *flags, schedule=None):
        command = ["train", target, "--data", self.path("data.npz"), "--batch", BATCH, "--steps", STEPS, *COMMON,
                   *flags]
        if schedule:
            command += ["--schedule", schedule]
        code, stdout, err = launch(ranks, "cleave", *command) if ranks else run(*command)
        self.assertEqual(code, 0, err)
        return losses_of(stdout), err

    def check_resume(self, target, ranks, optimizer, schedule=None, stop=3):
        """The whole run, and one stopped after `stop` steps then resumed: same steps, same bytes."""
        tag = f"{os.path.basename(target)}_{ranks}_{optimizer}_{schedule}"
        flags = OPTIMIZERS[optimizer] + (["--model", self.model] if target == self.plan else [])
        whole, _ = self.train(target, ranks, *flags, "-o", self.path(f"whole_{tag}"), schedule=schedule)
        checkpoints = self.path(f"ck_{tag}")
        first, _ = self.train(target, ranks, *flags, "--checkpoint-dir", checkpoints, "--checkpoint-every", 2,
                              "--stop-after", stop, schedule=schedule)
        self.assertEqual(os.listdir(checkpoints), [f"step-{stop:08d}"])  # the last complete one only
        rest, err = self.train(target, ranks, *flags, "--resume", checkpoints, "-o", self.path(f"resumed_{tag}"),
                               schedule=schedule)
        self.assertIn(f"resumed from {checkpoints}/step-{stop:08d} (step {stop})", err)
        self.assertEqual(first + rest, whole)
        self.assertEqual(files_of(self.path(f"resumed_{tag}")), files_of(self.path(f"whole_{tag}")))
        self.assertEqual(os.listdir(checkpoints), [f"step-{STEPS:08d}"])  # the run's end, in the folder resumed

    def test_a_model_resumes_exactly_with_each_optimizer(self):
        for optimizer in OPTIMIZERS:
            with self.subTest(optimizer=optimizer):
                self.check_resume(self.model, 0, optimizer)

    def test_a_plan_resumes_exactly_on_every_rank_count_and_schedule(self):
        self.check_resume(self.plan, 0, "adamw")
        for ranks, schedule, optimizer in [(2, "interleaved", "adamw"), (2, "looped_bfs", "sgd"),
                                           (4, "gpipe", "sgd"), (4, "1f1b", "adamw"), (4, "zero_bubble", "sgd")]:
            with self.subTest(ranks=ranks, schedule=schedule):
                self.check_resume(self.plan, ranks, optimizer, schedule, stop=4)

    def test_a_plan_resumes_exactly_on_another_rank_count(self):
        # Resharded: each rank finds its stages' tensors by name in whichever rank file holds them.
        # Pipelines train alike on any rank count, so the result is the uninterrupted run's bytes.
        flags = [*OPTIMIZERS["adamw"], "--model", self.model]
        whole, _ = self.train(self.plan, 0, *flags, "-o", self.path("whole"))
        for written, resumed, schedule in [(4, 2, "interleaved"), (2, 0, None)]:
            with self.subTest(written=written, resumed=resumed):
                checkpoints = self.path(f"ck_{written}_{resumed}")
                first, _ = self.train(self.plan, written, *flags, "--checkpoint-dir", checkpoints, "--stop-after", 3,
                                      schedule="1f1b" if written == 4 else None)
                rest, err = self.train(self.plan, resumed, *flags, "--resume", checkpoints, "-o",
                                       self.path(f"resumed_{written}_{resumed}"), schedule=schedule)
                self.assertIn(f"resharded from {written} rank(s) to {max(resumed, 1)}", err)
                self.assertEqual(first + rest, whole)
                self.assertEqual(files_of(self.path(f"resumed_{written}_{resumed}")), files_of(self.path("whole")))
        # Replicas (2 of a 2-rank pipeline) resume as one pipeline: the replicas' sums round
        # otherwise, so the losses agree to rounding.
        checkpoints = self.path("ck_replicas")
        first, _ = self.train(self.plan, 4, *flags, "--pipeline-ranks", 2, "--checkpoint-dir", checkpoints,
                              "--stop-after", 3)
        rest, _ = self.train(self.plan, 2, *flags, "--resume", checkpoints)
        np.testing.assert_allclose([s["loss"] for s in first + rest], [s["loss"] for s in whole], rtol=1e-5)

    def test_a_checkpoint_of_another_run_is_refused_naming_the_difference(self):
        checkpoints = self.path("ck")
        self.train(self.plan, 2, *OPTIMIZERS["sgd"], "--checkpoint-dir", checkpoints, "--stop-after", 2)
        base = ["train", self.plan, "--data", self.path("data.npz"), *COMMON, "--resume", checkpoints]
        sized = ["--batch", BATCH, "--steps", STEPS]
        code, _, err = launch(2, "cleave", *base, *sized, *OPTIMIZERS["adamw"])
        self.assertIn("was written with --optimizer sgd; this run has adamw", err.splitlines()[-1])
        code, _, err = launch(2, "cleave", *base, "--batch", BATCH, "--steps", 9, *OPTIMIZERS["sgd"])
        self.assertIn("the learning-rate schedule cosine over 6 steps, 1 of warmup; this run has cosine over 9",
                      err.splitlines()[-1])
        code, _, err = launch(2, "cleave", *base, "--batch", 10, "--steps", STEPS, *OPTIMIZERS["sgd"])
        self.assertIn("was written with --batch 8; this run has 10", err.splitlines()[-1])
        code, _, err = run("train", self.model, "--data", self.path("data.npz"), *COMMON, *sized, "--resume",
                           checkpoints, *OPTIMIZERS["sgd"])
        self.assertOneLineError(code, err, "training the plan's stages stage_0, stage_1, stage_2, stage_3; "
                                           "this run trains the whole model")
        # Another plan with the same stage names: the tensors differ, and the rank names the first.
        other = self.path("plan_other")
        shutil.copytree(self.plan, other)
        with open(os.path.join(other, "plan.json")) as f:
            plan = json.load(f)
        torch.manual_seed(5)
        wider = self.path("wider.onnx")

        class Wider(Mlp):
            def __init__(self):
                super().__init__()
                self.fc0, self.fc1 = torch.nn.Linear(6, 32), torch.nn.Linear(32, 16)

        torch.onnx.export(Wider(), (torch.randn(BATCH, 6), torch.zeros(BATCH, dtype=torch.long)), wider,
                          input_names=["x", "target"], output_names=["loss"], opset_version=13,
                          do_constant_folding=False, dynamic_axes={"x": {0: "n"}, "target": {0: "n"}}, dynamo=False)
        run("pipeline", wider, "--stages", 4, "-o", other, "--force", check=True)
        code, _, err = launch(2, "cleave", "train", other, "--data", self.path("data.npz"), *COMMON, *sized,
                              "--resume", checkpoints, *OPTIMIZERS["sgd"])
        self.assertRegex(err.splitlines()[-1], r"'stage_\d/fc\d\.(weight|bias)' is f32\[\d+(,\d+)?\] there, "
                                               r"f32\[\d+(,\d+)?\] here")
        # Damaged: a rank's tensors cut short.
        step = os.path.join(checkpoints, "step-00000002")
        with open(os.path.join(step, "rank-1.npz"), "r+b") as f:
            f.truncate(100)
        code, _, err = launch(2, "cleave", *base, *sized, *OPTIMIZERS["sgd"])
        self.assertNotEqual(code, 0)
        self.assertIn(f"--resume {checkpoints}: ", err.splitlines()[-1])
        self.assertIn("rank-1.npz", err.splitlines()[-1])

    def test_bad_checkpoint_requests(self):
        base = ["train", self.model, "--data", self.path("data.npz"), "--batch", BATCH, "--steps", STEPS, *COMMON]
        code, _, err = run(*base, "--resume", self.path("nothing"))
        self.assertOneLineError(code, err, "no complete checkpoint there")
        code, _, err = run(*base, "--stop-after", 2)
        self.assertOneLineError(code, err, "--stop-after needs a folder for checkpoints", exit_code=2)
        code, _, err = run(*base, "--checkpoint-every", 2)
        self.assertOneLineError(code, err, "--checkpoint-every needs a folder for checkpoints", exit_code=2)
        code, _, err = run(*base, "--checkpoint-dir", self.path("ck"), "--stop-after", STEPS + 1)
        self.assertOneLineError(code, err, f"--stop-after {STEPS + 1} is past --steps {STEPS}", exit_code=2)
        code, _, err = run(*base, "--checkpoint-dir", self.model)
        self.assertOneLineError(code, err, "is not a folder (checkpoints)")
        code, _, err = run(*base, "--checkpoint-dir", self.path("out/ck"), "-o", self.path("out"))
        self.assertOneLineError(code, err, "must be separate folders", exit_code=2)
        # A checkpoint at the run's end: resuming it has nothing left to run but still writes -o.
        checkpoints = self.path("done")
        self.train(self.model, 0, "--checkpoint-dir", checkpoints)
        steps, _ = self.train(self.model, 0, "--resume", checkpoints, "-o", self.path("again"))
        self.assertEqual(steps, [])
        self.assertTrue(os.path.exists(self.path("again/trained.onnx")))
        code, _, err = run(*base, "--resume", checkpoints, "--stop-after", 3)
        self.assertOneLineError(code, err, "its checkpoint is of step 6, and this run stops at step 3")

    def test_only_cleaves_own_folders_are_removed(self):
        checkpoints = self.path("ck")
        os.makedirs(os.path.join(checkpoints, "step-00000001"))  # not a checkpoint: a user's folder
        with open(os.path.join(checkpoints, "step-00000001", "notes.txt"), "w") as f:
            f.write("mine")
        with open(os.path.join(checkpoints, "README"), "w") as f:
            f.write("mine")
        os.makedirs(os.path.join(checkpoints, "step-00000002.partial"))  # a crashed run's partial step
        with open(os.path.join(checkpoints, "step-00000002.partial", "rank-0.npz"), "w") as f:
            f.write("half")
        self.train(self.model, 0, "--checkpoint-dir", checkpoints, "--checkpoint-every", 2)
        self.assertEqual(sorted(os.listdir(checkpoints)), ["README", "step-00000001", f"step-{STEPS:08d}"])
        # Deterministic: the same run writes the same checkpoint, byte for byte.
        again = self.path("ck2")
        self.train(self.model, 0, "--checkpoint-dir", again)
        for name in ("manifest.json", "rank-0.json", "rank-0.npz"):
            with open(os.path.join(checkpoints, f"step-{STEPS:08d}", name), "rb") as a, \
                    open(os.path.join(again, f"step-{STEPS:08d}", name), "rb") as b:
                self.assertEqual(a.read(), b.read(), name)

    def test_launch_restarts_every_rank_from_the_last_checkpoint_when_one_is_killed(self):
        # Long enough that rank 1 is killed mid-run: 400 steps, a checkpoint every 10.
        steps, every = 400, 10
        flags = ["train", self.plan, "--data", self.path("data.npz"), "--batch", BATCH, "--steps", steps,
                 "--microbatches", 2, *OPTIMIZERS["sgd"], "--lr-schedule", "linear", "--json",
                 "--schedule", "1f1b"]
        whole_out, resumed_out, checkpoints = self.path("whole"), self.path("restarted"), self.path("ck")
        code, whole, err = launch(4, "cleave", *flags, "-o", whole_out)
        self.assertEqual(code, 0, err)
        command = [CLEAVE, "launch", "--nproc", 4, "--master-port", free_port(), "--timeout", 30, "--max-restarts", 2,
                   "--", "cleave", *flags, "--checkpoint-dir", checkpoints, "--checkpoint-every", every, "-o",
                   resumed_out]
        launcher = subprocess.Popen(list(map(str, command)),
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            while not any(not n.endswith(".partial") for n in (os.listdir(checkpoints) if os.path.isdir(checkpoints)
                                                                else [])):
                self.assertLess(time.monotonic(), deadline, "no checkpoint was written")
                time.sleep(0.01)
            victim = self.rank_pid(launcher.pid, 1)
            os.kill(victim, signal.SIGKILL)
            stdout, stderr = launcher.communicate(timeout=120)
        finally:
            if launcher.poll() is None:
                os.killpg(launcher.pid, signal.SIGKILL)
        self.assertEqual(launcher.returncode, 0, stderr)
        self.assertIn("cleave launch: rank 1 died of signal Killed; restarting every rank (restart 1 of 2)", stderr)
        self.assertRegex(stderr, r"\[rank 0\] resumed from .*/step-\d{8} \(step \d+\)")
        resumed_at = int(stderr.split("(step ")[1].split(")")[0])
        self.assertGreater(resumed_at, 0)
        self.assertLess(resumed_at, steps)  # killed mid-run
        # The steps after the resume repeat the uninterrupted run's, and the trained files are its.
        got, want = losses_of(stdout), losses_of(whole)
        self.assertEqual(got[-(steps - resumed_at):], want[resumed_at:])
        self.assertEqual(files_of(resumed_out), files_of(whole_out))

    @staticmethod
    def rank_pid(launcher, rank):
        """The pid of rank `rank` among the launcher's children (its RANK variable)."""
        children = subprocess.run(["pgrep", "-P", str(launcher)], capture_output=True, text=True).stdout.split()
        for pid in map(int, children):
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if f"RANK={rank}".encode() in f.read().split(b"\0"):
                        return pid
            except OSError:
                continue
        raise AssertionError(f"no rank {rank} under launcher {launcher}")


if __name__ == "__main__":
    main()
