"""cleave's pipeline training against PyTorch's own (torch.distributed.pipelining, PyTorch 2.11),
on CPU ranks over Gloo, schedule by schedule.

One model, a stack of Linear+tanh layers with a pipe_split() after each but the last and an MSE
loss, is trained for 3 SGD steps of 8 rows in 4 microbatches:
- by torch: pipeline() cuts it at its markers into 4 stages, each rank builds its PipelineStages
  and runs ScheduleGPipe, Schedule1F1B (4 ranks), ScheduleInterleaved1F1B, ScheduleLoopedBFS,
  ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble or ScheduleDualPipeV (2 ranks, 2 stages
  each), then torch.optim.SGD steps each rank's stages;
- by cleave: its TorchScript export with the loss is cut at the same layer boundaries
  (`pipeline --split-spec`: the ONNX exporters drop pipe_split) and trained under `cleave launch`
  with gpipe, 1f1b, interleaved, looped_bfs, zero_bubble, zbv and dualpipev on as many ranks
  (zero_bubble: one stage on each of 4 ranks, where torch's interleaves 2 stages on 2).
The trained parameters must agree within rtol 1e-5 and atol 4e-5, and both must equal the
single-process torch.optim run. Every schedule exists on both sides.

torch 2.11's stage set-up exchanges a dummy tensor with each neighbouring stage, its own rank
included where a V schedule (ZBV, DualPipeV) puts two neighbours on one rank; Gloo cannot send to
its own rank, so on Gloo those two schedules fail before their first step. The torch side here
drops those self-sends (set-up only; the schedule's own transfers are untouched).
"""
import json
import os
import time

import numpy as np
import onnx
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from onnx import numpy_helper
from torch.distributed.pipelining import PipelineStage, pipe_split, pipeline
from torch.distributed.pipelining import schedules

from testlib import TempDirTest, free_port, launch, main, run

WIDTH, LAYERS, STEPS, BATCH, MICROBATCHES, LR = 16, 4, 3, 8, 4, 0.1

# cleave's schedule and its ranks, torch's and its ranks (4 stages in all). cleave's zero_bubble
# runs one stage per rank (ZB-H1); torch's zero bubble without a V interleaves stages on a rank
# (ScheduleInterleavedZeroBubble): each side's form is trained on its own rank count.
SCHEDULES = [("gpipe", 4, "ScheduleGPipe", 4), ("1f1b", 4, "Schedule1F1B", 4),
             ("interleaved", 2, "ScheduleInterleaved1F1B", 2), ("looped_bfs", 2, "ScheduleLoopedBFS", 2),
             ("zero_bubble", 4, "ScheduleInterleavedZeroBubble", 2), ("zbv", 2, "ScheduleZBVZeroBubble", 2),
             ("dualpipev", 2, "ScheduleDualPipeV", 2)]
V_SCHEDULES = ("ScheduleZBVZeroBubble", "ScheduleDualPipeV")
SINGLE_STAGE = ("ScheduleGPipe", "Schedule1F1B")


class Stack(torch.nn.Module):
    def __init__(self, markers=True):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)])
        self.markers = markers

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = torch.tanh(layer(x))
            if self.markers and i < LAYERS - 1:
                pipe_split()
        return x


class DecoderBlock(torch.nn.Module):
    """Pre-norm causal self-attention (2 heads) and a GELU MLP, each with its residual."""

    def __init__(self, heads=2):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(WIDTH), torch.nn.LayerNorm(WIDTH)
        self.qkv, self.proj = torch.nn.Linear(WIDTH, 3 * WIDTH), torch.nn.Linear(WIDTH, WIDTH)
        self.up, self.down = torch.nn.Linear(WIDTH, 2 * WIDTH), torch.nn.Linear(2 * WIDTH, WIDTH)

    def forward(self, x):
        n, t, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(n, t, 3, self.heads, WIDTH // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / (WIDTH // self.heads) ** 0.5
        causal = torch.ones(t, t, dtype=torch.bool).triu(1)
        attended = torch.softmax(scores.masked_fill(causal, float("-inf")), dim=-1) @ v
        x = x + self.proj(attended.transpose(1, 2).reshape(n, t, WIDTH))
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm2(x))))


class Decoder(torch.nn.Module):
    """Token embedding, LAYERS blocks with a pipe_split() after each but the last, a final norm and
    the vocabulary head; the loss is cross-entropy over every position."""

    def __init__(self, markers=True, vocabulary=12):
        super().__init__()
        self.embed = torch.nn.Embedding(vocabulary, WIDTH)
        self.blocks = torch.nn.ModuleList([DecoderBlock() for _ in range(LAYERS)])
        self.norm, self.head = torch.nn.LayerNorm(WIDTH), torch.nn.Linear(WIDTH, vocabulary)
        self.markers = markers

    def forward(self, tokens):
        x = self.embed(tokens)
        for i, block in enumerate(self.blocks):
            x = block(x)
            if self.markers and i < LAYERS - 1:
                pipe_split()
        return self.head(self.norm(x))


def mlp_data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(BATCH * STEPS, WIDTH, generator=g), torch.randn(BATCH * STEPS, WIDTH, generator=g)


def decoder_data():
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 12, (BATCH * STEPS, 6), generator=g)
    return tokens, torch.randint(0, 12, (BATCH * STEPS, 6), generator=g)


def token_loss(logits, target):
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


# name: (the model's class, its data, its loss, the module list the markers separate)
MODELS = {"mlp": (Stack, mlp_data, torch.nn.functional.mse_loss, "layers"),
          "decoder": (Decoder, decoder_data, token_loss, "blocks")}


class WithLoss(torch.nn.Module):
    def __init__(self, model, loss):
        super().__init__()
        self.model, self.loss = model, loss

    def forward(self, x, target):
        return self.loss(self.model(x), target)


def fresh_model(name, markers=True):
    torch.manual_seed(0)
    return MODELS[name][0](markers)


def _without_self_sends(original):
    def ops(stage):
        me = dist.get_rank(stage.group)
        return [op for op in original(stage) if op.group_peer != me]
    return ops


def torch_rank(rank, world, name, schedule, port, out, steps=STEPS):
    """One rank of torch's pipeline training for `steps` steps (the data's STEPS batches in turn);
    writes its stages' trained parameters and each step's seconds (from a barrier before it to its
    optimizer step) to out.RANK.json."""
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    PipelineStage._get_init_p2p_neighbors_ops = _without_self_sends(PipelineStage._get_init_p2p_neighbors_ops)
    _, data, loss, _ = MODELS[name]
    x, y = data()
    pipe = pipeline(fresh_model(name), mb_args=(x[: BATCH // MICROBATCHES],))
    kind = getattr(schedules, schedule)
    if schedule in SINGLE_STAGE:
        ids = [rank]
    elif schedule in V_SCHEDULES:
        ids = [rank, 2 * world - 1 - rank]
    else:
        ids = [rank, rank + world]
    stages = [PipelineStage(pipe.get_stage_module(i), i, pipe.num_stages, torch.device("cpu")) for i in ids]
    runner = kind(stages[0] if schedule in SINGLE_STAGE else stages, n_microbatches=MICROBATCHES, loss_fn=loss)
    optimizer = torch.optim.SGD([p for s in stages for p in s.submod.parameters()], lr=LR)
    seconds = []
    for step in range(steps):
        rows = slice(step % STEPS * BATCH, (step % STEPS + 1) * BATCH)
        dist.barrier()
        start = time.perf_counter()
        optimizer.zero_grad()
        args = (x[rows],) if 0 in ids else ()
        kwargs = {"target": y[rows]} if pipe.num_stages - 1 in ids else {}
        runner.step(*args, **kwargs)
        optimizer.step()
        seconds.append(time.perf_counter() - start)
    with open(f"{out}.{rank}.json", "w") as f:
        json.dump({"parameters": {n: p.detach().tolist() for s in stages for n, p in s.submod.named_parameters()},
                   "step_seconds": seconds}, f)
    dist.destroy_process_group()


class PipeliningParity(TempDirTest):
    def torch_trained(self, name, schedule, world):
        out = self.path(f"{name}_{schedule}")
        mp.spawn(torch_rank, args=(world, name, schedule, free_port(), out), nprocs=world)
        trained = {}
        for rank in range(world):
            with open(f"{out}.{rank}.json") as f:
                trained.update({n: np.array(v, dtype=np.float32) for n, v in json.load(f)["parameters"].items()})
        return trained

    def single_process(self, name):
        _, data, loss, _ = MODELS[name]
        model = fresh_model(name, markers=False)
        optimizer = torch.optim.SGD(model.parameters(), lr=LR)
        x, y = data()
        for step in range(STEPS):
            rows = slice(step * BATCH, (step + 1) * BATCH)
            optimizer.zero_grad()
            loss(model(x[rows]), y[rows]).backward()
            optimizer.step()
        return {n: p.detach().numpy() for n, p in model.named_parameters()}

    def cleave_plan(self, name):
        _, data, loss, modules = MODELS[name]
        model = self.path(f"{name}.onnx")
        x, y = data()
        torch.onnx.export(WithLoss(fresh_model(name, markers=False), loss), (x[:BATCH], y[:BATCH]), model,
                          input_names=["x", "target"], output_names=["loss"], opset_version=17,
                          do_constant_folding=False, dynamic_axes={"x": {0: "n"}, "target": {0: "n"}}, dynamo=False,
                          # An eval-mode export merges parameters of equal value (every LayerNorm's
                          # ones) into one initializer, which would then train tied.
                          training=torch.onnx.TrainingMode.TRAINING)
        np.savez(self.path(f"{name}.npz"), x=x.numpy(), target=y.numpy())
        spec = self.path(f"{name}.spec.json")
        with open(spec, "w") as f:  # a cut where each pipe_split() stands: before modules 1, 2 and 3
            json.dump({"split_spec": {f"model.{modules}.{i}": "BEGINNING" for i in range(1, LAYERS)}}, f)
        plan = self.path(f"{name}_stages")
        code, out, err = run("pipeline", model, "--split-spec", spec, "-o", plan, "--json")
        self.assertEqual(code, 0, err)
        self.assertEqual(len(json.loads(out)["stages"]), LAYERS)
        return model, plan

    def cleave_trained(self, name, model, plan, schedule, ranks):
        out = self.path(f"trained_{name}_{schedule}")
        code, _, err = launch(ranks, "cleave", "train", plan, "--model", model, "--data", self.path(f"{name}.npz"),
                              "--batch", BATCH, "--steps", STEPS, "--microbatches", MICROBATCHES, "--optimizer", "sgd",
                              "--lr", LR, "--schedule", schedule, "-o", out)
        self.assertEqual(code, 0, err)
        initializers = onnx.load(os.path.join(out, "trained.onnx")).graph.initializer
        return {t.name.removeprefix("model."): numpy_helper.to_array(t) for t in initializers}

    def check(self, name):
        model, plan = self.cleave_plan(name)
        reference = self.single_process(name)
        initial = fresh_model(name).state_dict()
        compared = 0
        for ours, our_ranks, theirs, their_ranks in SCHEDULES:
            with self.subTest(model=name, schedule=ours):
                torch_side = self.torch_trained(name, theirs, their_ranks)
                cleave_side = self.cleave_trained(name, model, plan, ours, our_ranks)
                self.assertEqual(set(torch_side), set(reference))
                for tensor, value in reference.items():
                    np.testing.assert_allclose(torch_side[tensor], value, rtol=1e-5, atol=4e-5, err_msg=f"torch {tensor}")
                    np.testing.assert_allclose(cleave_side[tensor], torch_side[tensor], rtol=1e-5, atol=4e-5,
                                               err_msg=f"cleave {tensor}")
                    self.assertGreater(np.abs(value - initial[tensor].numpy()).max(), 1e-5, tensor)  # it trained
                compared += 1
        self.assertEqual(compared, len(SCHEDULES))

    def test_an_eval_mode_export_says_which_parameters_it_merged(self):
        """An eval-mode export merges the decoder's 9 LayerNorms' equal weights (and biases) into one
        initializer, which would train as one; cleave train says so, and a training-mode export
        has none to say."""
        x, y = decoder_data()
        np.savez(self.path("tokens.npz"), x=x.numpy(), target=y.numpy())
        for mode, shared in ((torch.onnx.TrainingMode.EVAL, 2), (torch.onnx.TrainingMode.TRAINING, 0)):
            with self.subTest(mode=mode):
                model = self.path(f"decoder_{mode.name}.onnx")
                torch.onnx.export(WithLoss(fresh_model("decoder", markers=False), token_loss), (x[:BATCH], y[:BATCH]),
                                  model, input_names=["x", "target"], output_names=["loss"], opset_version=17,
                                  do_constant_folding=False, dynamo=False, training=mode)
                common = ["train", model, "--data", self.path("tokens.npz"), "--batch", BATCH]
                code, out, err = run(*common, "--json")
                self.assertEqual(code, 0, err)
                self.assertEqual(json.loads(out.splitlines()[0])["trainable"]["shared"], shared)
                code, out, err = run(*common)
                self.assertEqual(code, 0, err)
                said = [line for line in out.splitlines() if "read by more than one module" in line]
                self.assertEqual(len(said), 1 if shared else 0, out)
                if shared:
                    self.assertIn("read by 9 modules", said[0])
                    self.assertIn("training=torch.onnx.TrainingMode.TRAINING", said[0])

    def test_an_mlp_trains_as_torchs_pipelining_trains_it_on_every_schedule(self):
        self.check("mlp")

    def test_a_decoder_trains_as_torchs_pipelining_trains_it_on_every_schedule(self):
        self.check("decoder")


if __name__ == "__main__":
    main()
