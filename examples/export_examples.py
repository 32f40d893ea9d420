"""Export cleave's example models with PyTorch's TorchScript exporter (random weights, fixed seed).

    .venv/bin/python3 examples/export_examples.py [OUT_DIR] [--large]

Writes, for each model, NAME.onnx (opset 17) and NAME.fx.json (FX graph, tools/cleave_fx.py):
  cnn          a small ResNet-style CNN (conv, batchnorm, relu, residual add, pooling, linear)
  transformer  a 2-layer torch.nn.TransformerEncoder (d_model 64, 4 heads)
  dlrm         a DLRM-like model: dense MLP, 3 EmbeddingBag tables, dot interaction, top MLP
The committed files in examples/ are these (under 1 MB together). --large also writes
resnet18.onnx and mobilenet_v2.onnx from torchvision (tens of MB: generated when needed,
never committed).
"""
import os
import sys

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import cleave_fx  # noqa: E402

OPSET = 17


class BasicBlock(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + x)


class SmallCnn(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.layer1 = nn.Sequential(BasicBlock(16), BasicBlock(16))
        self.down = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.layer2 = nn.Sequential(BasicBlock(32))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, classes)

    def forward(self, x):
        x = torch.relu(self.stem(x))
        x = self.layer1(x)
        x = torch.relu(self.down(x))
        x = self.layer2(x)
        x = torch.flatten(self.pool(x), 1)
        return self.fc(x)


class Encoder(nn.Module):
    def __init__(self, d_model=64, heads=4, layers=2):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=128, dropout=0.0,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, d_model)

    def forward(self, x):
        return self.head(self.encoder(x))


class Dlrm(nn.Module):
    """Bottom MLP on dense features, EmbeddingBag tables on sparse ids, pairwise dot
    interactions, top MLP: the structure of Facebook's DLRM at toy size."""

    def __init__(self, dense=13, dim=16, tables=(1000, 500, 200)):
        super().__init__()
        self.bottom = nn.Sequential(nn.Linear(dense, 32), nn.ReLU(), nn.Linear(32, dim), nn.ReLU())
        self.embeddings = nn.ModuleList([nn.EmbeddingBag(rows, dim, mode="sum") for rows in tables])
        pairs = (len(tables) + 1) * len(tables) // 2
        self.top = nn.Sequential(nn.Linear(dim + pairs, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, dense, indices, offsets):
        x = self.bottom(dense)
        features = [x] + [emb(indices[i], offsets[i]) for i, emb in enumerate(self.embeddings)]
        stacked = torch.stack(features, dim=1)
        dots = torch.bmm(stacked, stacked.transpose(1, 2))
        rows, cols = torch.triu_indices(len(features), len(features), offset=1)
        interactions = dots[:, rows, cols]
        return torch.sigmoid(self.top(torch.cat([x, interactions], dim=1)))


def dlrm_inputs(batch=4, bag=3, tables=(1000, 500, 200)):
    g = torch.Generator().manual_seed(1)
    dense = torch.randn(batch, 13, generator=g)
    indices = torch.stack([torch.randint(0, min(tables), (batch * bag,), generator=g) for _ in tables])
    offsets = torch.arange(0, batch * bag, bag).repeat(len(tables), 1)
    return dense, indices, offsets


def models():
    torch.manual_seed(0)
    yield "cnn", SmallCnn().eval(), (torch.randn(1, 3, 32, 32),), ["x"], ["logits"]
    torch.manual_seed(0)
    yield "transformer", Encoder().eval(), (torch.randn(1, 16, 64),), ["x"], ["y"]
    torch.manual_seed(0)
    yield "dlrm", Dlrm().eval(), dlrm_inputs(), ["dense", "indices", "offsets"], ["ctr"]


def export(name, model, inputs, input_names, output_names, out_dir, fx=True):
    path = os.path.join(out_dir, f"{name}.onnx")
    # Gradients stay enabled: under no_grad, TransformerEncoderLayer takes its fused fast path
    # (aten::_transformer_encoder_layer_fwd), which has no ONNX export.
    torch.onnx.export(model, inputs, path, opset_version=OPSET, input_names=input_names,
                      output_names=output_names, do_constant_folding=True, dynamo=False)
    if fx:
        gm = torch.fx.symbolic_trace(model)
        cleave_fx.export_graph(gm, inputs, os.path.join(out_dir, f"{name}.fx.json"))
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    out_dir = args[0] if args else HERE
    os.makedirs(out_dir, exist_ok=True)
    for name, model, inputs, input_names, output_names in models():
        export(name, model, inputs, input_names, output_names, out_dir)
    if "--large" in sys.argv:
        import torchvision
        for name in ("resnet18", "mobilenet_v2"):
            torch.manual_seed(0)
            model = getattr(torchvision.models, name)(weights=None).eval()
            export(name, model, (torch.randn(1, 3, 224, 224),), ["x"], ["logits"], out_dir, fx=False)


if __name__ == "__main__":
    main()
