"""A GPT-style decoder with its loss, as people pretrain it: pre-norm blocks, causal attention, a
GELU MLP, learned positions and an embedding tied to the head; exported with torch 2.x's default
ONNX exporter (dynamo=True, its default optimize=True) so that `cleave train` takes it.

    model = GPT(GPTConfig(vocab=256, width=128, heads=4, layers=4, seq=128))
    export(model, "gpt.onnx", rows=8)

The forward takes `tokens` [rows, seq] and `targets` [rows, seq] (int64) and returns the mean
cross-entropy `loss`; rows are a dynamic dimension of the export, so `cleave train` may split a
batch into microbatches. Dropout is off (0): cleave's dropout draws differ from torch's.
"""
import dataclasses
import math
import warnings

import torch


@dataclasses.dataclass
class GPTConfig:
    vocab: int = 256
    width: int = 128
    heads: int = 4
    layers: int = 4
    seq: int = 128


class Block(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.ln1, self.ln2 = torch.nn.LayerNorm(config.width), torch.nn.LayerNorm(config.width)
        self.qkv = torch.nn.Linear(config.width, 3 * config.width)
        self.proj = torch.nn.Linear(config.width, config.width)
        self.fc = torch.nn.Linear(config.width, 4 * config.width)
        self.out = torch.nn.Linear(4 * config.width, config.width)
        causal = torch.triu(torch.full((config.seq, config.seq), float("-inf")), diagonal=1)
        self.register_buffer("causal", causal)

    def forward(self, x):
        rows, seq, width = x.shape
        heads = self.config.heads
        q, k, v = self.qkv(self.ln1(x)).split(width, dim=-1)
        split = lambda t: t.reshape(rows, seq, heads, width // heads).transpose(1, 2)
        q, k, v = split(q), split(k), split(v)
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(width // heads)) + self.causal
        attended = (scores.softmax(-1) @ v).transpose(1, 2).reshape(rows, seq, width)
        x = x + self.proj(attended)
        return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x))))


class GPT(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed = torch.nn.Embedding(config.vocab, config.width)
        # Positions as a parameter added whole: the exporter folds an Embedding gathered at
        # constant positions into a constant, which would not train.
        self.positions = torch.nn.Parameter(torch.zeros(config.seq, config.width))
        self.blocks = torch.nn.ModuleList([Block(config) for _ in range(config.layers)])
        self.norm = torch.nn.LayerNorm(config.width)
        self.head = torch.nn.Linear(config.width, config.vocab, bias=False)
        self.head.weight = self.embed.weight  # tied
        self.apply(self._initialize)

    @staticmethod
    def _initialize(module):
        if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
            torch.nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, torch.nn.Linear) and module.bias is not None:
            torch.nn.init.zeros_(module.bias)

    def forward(self, tokens, targets):
        x = self.embed(tokens) + self.positions
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        return torch.nn.functional.cross_entropy(logits.reshape(-1, self.config.vocab), targets.reshape(-1))


def export(model, path, rows=2):
    """torch.onnx.export with its defaults (dynamo=True, optimize=True), rows dynamic."""
    # Two tensors: torch.export would take one tensor given twice for one input.
    tokens = torch.zeros(rows, model.config.seq, dtype=torch.long)
    targets = torch.ones(rows, model.config.seq, dtype=torch.long)
    batch = torch.export.Dim("rows")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (tokens, targets), path, dynamo=True, input_names=["tokens", "targets"],
                          output_names=["loss"], dynamic_shapes={"tokens": {0: batch}, "targets": {0: batch}})


def windows(ids, starts, seq):
    """The rows `cleave train` reads from a token stream: for each start, the window of seq ids and
    its targets shifted by one (int64)."""
    rows = torch.stack([torch.as_tensor(ids[s:s + seq + 1].astype("int64")) for s in starts])
    return rows[:, :-1], rows[:, 1:]
