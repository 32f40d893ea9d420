"""Training on a CUDA GPU (ctest label `gpu`), against PyTorch's own CUDA training with TF32 off,
within torch's pipeline tests' tolerances (rtol 1e-5, atol 4e-5): pipeline_training_test.py's MLP
with MSE, 3 steps of SGD with momentum on a batch of 10 rows in 4 uneven microbatches,
  - whole, with `cleave train --backend aten-cuda`;
  - as a 4-stage plan with every stage on the one GPU in one process;
  - as that plan on 2 ranks sharing the GPU, Gloo between them (NCCL refuses two ranks on one
    GPU), which must give the one process's losses;
  - as a 2-stage plan on a world of one rank over `--transport nccl` (the NCCL code path: its
    rendezvous, reductions and the loss's all-reduce; one GPU cannot run NCCL between ranks);
  - whole with `--precision bf16`, against torch.autocast("cuda", bfloat16) training.
Where torch, CUDA or this build's CUDA wing is missing, every case is skipped with the reason and
the script exits 77 (ctest's SKIP_RETURN_CODE): CI machines have no GPU."""
import json
import unittest

from testlib import TempDirTest, launch, main, run


def why_not():
    """Why training on CUDA cannot be checked here, or None."""
    try:
        import torch
    except ImportError as e:
        return f"no torch ({e})"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    from gpu_test import SKIP_REASON
    return SKIP_REASON


SKIP_REASON = why_not()
if SKIP_REASON is None:
    import numpy as np
    import torch
    from pipeline_training_test import ATOL, BATCH, MICROBATCHES, RTOL, STEPS, MlpMse, data_for

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

SGD = ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9"]


@unittest.skipIf(SKIP_REASON is not None, f"no CUDA training: {SKIP_REASON}")
class TrainingOnTheGpu(TempDirTest):
    def setUp(self):
        super().setUp()
        torch.manual_seed(0)
        self.module = MlpMse()
        self.initial = {k: v.clone() for k, v in self.module.state_dict().items()}
        self.x, self.target = data_for("mlp", torch.Generator().manual_seed(1))
        np.savez(self.path("data.npz"), x=self.x.numpy(), target=self.target.numpy())
        self.model = self.path("mlp.onnx")
        torch.onnx.export(self.module, (self.x[:BATCH], self.target[:BATCH]), self.model, input_names=["x", "target"],
                          output_names=["loss"], opset_version=13, do_constant_folding=False,
                          dynamic_axes={"x": {0: "n"}, "target": {0: "n"}}, dynamo=False)

    def torch_cuda_losses(self, autocast=None):
        """torch's CUDA training losses; `autocast` (a dtype): each forward under torch.autocast."""
        module = MlpMse().cuda()
        module.load_state_dict(self.initial)
        optimizer = torch.optim.SGD(module.parameters(), lr=0.05, momentum=0.9)
        losses = []
        for step in range(STEPS):
            rows = slice(step * BATCH, (step + 1) * BATCH)
            optimizer.zero_grad()
            with torch.autocast("cuda", dtype=autocast or torch.float16, enabled=autocast is not None):
                loss = module(self.x[rows].cuda(), self.target[rows].cuda())
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        return losses

    def losses(self, model, *extra, ranks=0):
        command = ["train", model, "--data", self.path("data.npz"), "--batch", BATCH, "--steps", STEPS,
                   "--microbatches", MICROBATCHES, *SGD, "--backend", "aten-cuda", "--json", *extra]
        code, out, err = launch(ranks, "cleave", *command) if ranks else run(*command)
        self.assertEqual(code, 0, err)
        return [json.loads(line.split("] ", 1)[-1])["loss"] for line in out.splitlines()]

    def plan(self, stages):
        plan = self.path(f"plan{stages}")
        run("pipeline", self.model, "--stages", stages, "-o", plan, check=True)
        return plan

    def test_a_whole_model_trains_as_torch_on_cuda(self):
        want = self.torch_cuda_losses()
        np.testing.assert_allclose(self.losses(self.model), want, rtol=RTOL, atol=ATOL)
        self.assertLess(want[-1], want[0])

    def test_four_stages_on_one_gpu_and_two_ranks_sharing_it(self):
        plan = self.plan(4)
        one_process = self.losses(plan)
        np.testing.assert_allclose(one_process, self.torch_cuda_losses(), rtol=RTOL, atol=ATOL)
        for schedule in ([], ["--schedule", "interleaved"]):  # GPipe's order, and 1F1B's over two stages a rank
            with self.subTest(schedule=schedule):
                shared = self.losses(plan, "--transport", "gloo", *schedule, ranks=2)
                self.assertEqual(shared, one_process)

    def test_bf16_trains_as_torch_autocast_on_cuda(self):
        # --precision bf16 on aten-cuda: the forward under torch.autocast("cuda", bfloat16), float32
        # master weights, as torch's own mixed-precision step (train_test.py's CPU case, here on CUDA).
        want = self.torch_cuda_losses(autocast=torch.bfloat16)
        got = self.losses(self.model, "--precision", "bf16")  # in 4 microbatches: each rounds alike
        np.testing.assert_allclose(got, want, rtol=2e-3)
        self.assertGreater(max(abs(a - b) for a, b in zip(got, self.losses(self.model))), 1e-6)

    def test_a_world_of_one_rank_runs_the_nccl_transport(self):
        plan = self.plan(2)
        self.assertEqual(self.losses(plan, "--transport", "nccl", ranks=1), self.losses(plan))


if __name__ == "__main__":
    main(SKIP_REASON)
