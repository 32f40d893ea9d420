"""Export the runtime's model zoo with PyTorch's TorchScript exporter (random weights, fixed seeds).

    .venv/bin/python3 tools/export_zoo.py OUT_DIR [NAME ...] [--small] [--dynamo] [--image=SIZE]

Writes NAME.onnx and NAME.inputs.json (a sample input, tests/oracle format) for:
  resnet50           torchvision, opset 13          mobilenet_v3_large  torchvision, opset 14
  vit_b_16           torchvision, opset 15          transformer_encoder torch.nn.TransformerEncoder, opset 17
  gpt2               a GPT-2-style decoder, opset 16   dlrm            DLRM-like with EmbeddingBag, opset 17
  lstm, gru          2-layer bidirectional LSTM / GRU taggers (batch first), opset 14
  deeplabv3          torchvision deeplabv3_mobilenet_v3_large, opset 12
  lraspp             torchvision lraspp_mobilenet_v3_large, opset 11
  fcn                torchvision fcn_resnet50, opset 13
  swin_t             torchvision swin_t, opset 17
  maxvit_t           torchvision maxvit_t (MBConv with GELU, attention as Einsum), opset 17
  dcgan              DCGAN's generator (five ConvTranspose layers; batch 16), opset 13
  r3d_18             torchvision's video ResNet (3-D convolutions; 8 frames of 112x112), opset 14
  ssdlite            torchvision ssdlite320_mobilenet_v3_large (TopK, batched NonMaxSuppression in an If), opset 14
  fasterrcnn         torchvision fasterrcnn_mobilenet_v3_large_320_fpn (RoiAlign, NonMaxSuppression; every
                     score kept, so its 100 detections are compared), opset 14
  retinanet          torchvision retinanet_resnet50_fpn at 320x320 (one head's weights run over five pyramid
                     levels; every score kept, 50 detections), opset 16
  maskrcnn           torchvision maskrcnn_resnet50_fpn at 320x320 (20 detections with their masks: a Loop
                     pastes each), opset 16
  fcos               torchvision fcos_resnet50_fpn at 320x320 (GroupNorm heads shared by five levels), opset 16
  ssd300             torchvision ssd300_vgg16 (300x300; 50 detections), opset 16
  wav2letter         1-D convolutions after wav2letter (80 mel features, 1000 steps; BatchNorm1d), opset 14
  bert_base          a BERT-base-sized encoder (12 x 768, 12 heads), opset 17 (benchmarks)
  convnext_tiny      torchvision convnext_tiny (depthwise 7x7, LayerNorm over channels, GELU, layer scale), opset 17
  resnext50_32x4d    torchvision resnext50_32x4d (grouped 3x3 convolutions), opset 13
--small shrinks the encoder/decoder sizes and image sizes for fast tests (same op sets; r3d_18's
small form is TinyVideoNet below, 3-D like it, with a MaxPool3d added; the detectors resize every
image to 320x320 themselves, so --small does not shrink them).
--image=SIZE exports the image models (classifiers, segmentation, ConvNeXt, ResNeXt) at SIZE x SIZE
instead (bench/runtime.sh's IMAGE: full-size models at 64x64, where fixed costs show).
--dynamo exports with torch 2.x's default exporter (torch.export-based, its default opset) instead;
a model it fails on is named with the exporter's error and skipped.
Existing files are kept (delete them to re-export).
"""
import json
import math
import os
import sys

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))


class CausalSelfAttention(nn.Module):
    def __init__(self, dim, heads, context):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.register_buffer("mask", torch.tril(torch.ones(context, context)).view(1, 1, context, context))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf"))
        att = torch.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y)


class GeluTanh(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Block(nn.Module):
    def __init__(self, dim, heads, context):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads, context)
        self.ln_2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), GeluTanh(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt2(nn.Module):
    def __init__(self, vocab=1000, context=64, dim=128, heads=4, layers=2):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(context, dim)
        self.blocks = nn.ModuleList([Block(dim, heads, context) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, ids):
        positions = torch.arange(0, ids.size(1), dtype=torch.long).unsqueeze(0)
        x = self.wte(ids) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class RmsNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_pairs(x, cos, sin):
    """Rotary embedding on the pairs (x[..., 0::2], x[..., 1::2])."""
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), -1).flatten(-2)


class LlamaBlock(nn.Module):
    def __init__(self, dim, heads, hidden):
        super().__init__()
        self.heads = heads
        self.attention_norm, self.mlp_norm = RmsNorm(dim), RmsNorm(dim)
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.gate, self.up = nn.Linear(dim, hidden, bias=False), nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x, mask, cos, sin):
        rows, steps, dim = x.shape
        h = self.attention_norm(x)
        heads = lambda t: t.view(rows, steps, self.heads, dim // self.heads).transpose(1, 2)  # noqa: E731
        q, k, v = heads(self.q(h)), heads(self.k(h)), heads(self.v(h))
        q, k = rotate_pairs(q, cos, sin), rotate_pairs(k, cos, sin)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(dim // self.heads) + mask
        attended = torch.matmul(scores.softmax(-1), v).transpose(1, 2).reshape(rows, steps, dim)
        x = x + self.o(attended)
        h = self.mlp_norm(x)
        return x + self.down(nn.functional.silu(self.gate(h)) * self.up(h))


class LlamaDecoder(nn.Module):
    """A LLaMA-style decoder: RMSNorm, rotary embeddings and the causal mask made in forward from
    the sequence's length, SwiGLU MLPs, and the token embedding tied to the head."""

    def __init__(self, vocab=256, dim=64, heads=4, layers=2, hidden=172):
        super().__init__()
        self.head_dim = dim // heads
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList([LlamaBlock(dim, heads, hidden) for _ in range(layers)])
        self.norm = RmsNorm(dim)

    def forward(self, ids):
        steps = ids.size(1)
        mask = torch.full((steps, steps), -1e9).triu(1)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim))
        angles = torch.arange(steps, dtype=torch.float32)[:, None] * inv_freq[None, :]
        cos, sin = angles.cos(), angles.sin()
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x, mask, cos, sin)
        return torch.matmul(self.norm(x), self.embed.weight.t())


class Encoder(nn.Module):
    def __init__(self, dim, heads, layers, ff, activation="relu"):
        super().__init__()
        layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=ff, dropout=0.0, batch_first=True,
                                           activation=activation)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        # TransformerEncoder deep-copies `layer`: its layers would start equal, and the ONNX
        # exporter stores equal weights once (BERT-base's 340 MB as 28 MB, small enough to stay in
        # a CPU's cache). Each layer after the first is initialized again, as a trained model's
        # layers differ.
        for copy in list(self.encoder.layers)[1:]:
            for m in copy.modules():
                if isinstance(m, nn.MultiheadAttention):
                    m._reset_parameters()
                elif isinstance(m, nn.Linear):
                    m.reset_parameters()

    def forward(self, x):
        return self.encoder(x)


class DcganGenerator(nn.Module):
    """DCGAN's generator: a latent [B, 100, 1, 1] up to a [B, 3, 64, 64] image by five
    ConvTranspose layers (the first 4x4 from 1x1, then stride 2), BatchNorm and ReLU, Tanh last."""

    def __init__(self, latent=100, width=64):
        super().__init__()
        layers, channels = [], [latent, 8 * width, 4 * width, 2 * width, width]
        for k, (cin, cout) in enumerate(zip(channels, channels[1:])):
            layers += [nn.ConvTranspose2d(cin, cout, 4, 1 if k == 0 else 2, 0 if k == 0 else 1, bias=False),
                       nn.BatchNorm2d(cout), nn.ReLU()]
        layers += [nn.ConvTranspose2d(width, 3, 4, 2, 1, bias=False), nn.Tanh()]
        self.net = nn.Sequential(*layers)

    def forward(self, z):
        return self.net(z)


class Wav2LetterLike(nn.Module):
    """A speech model of 1-D convolutions after wav2letter: mel features [B, 80, T] through a
    strided stem, a stack of width-11 convolutions with BatchNorm and ReLU (one with a residual),
    a dilated wide convolution and 1x1 layers to 29 characters per step."""

    def __init__(self, features=80, width=256, wide=512, stack=6):
        super().__init__()

        def unit(cin, cout, kernel, stride=1, dilation=1):
            return nn.Sequential(nn.Conv1d(cin, cout, kernel, stride, dilation * (kernel // 2), dilation),
                                 nn.BatchNorm1d(cout), nn.ReLU())

        self.stem = unit(features, width, 11, stride=2)
        self.stack = nn.ModuleList(unit(width, width, 11) for _ in range(stack))
        self.head = nn.Sequential(unit(width, wide, 29, dilation=2), nn.Conv1d(wide, wide, 1), nn.ReLU(),
                                  nn.Conv1d(wide, 29, 1))

    def forward(self, x):
        x = self.stem(x)
        for k, layer in enumerate(self.stack):
            x = layer(x) + x if k == 2 else layer(x)
        return self.head(x)


class TinyVideoNet(nn.Module):
    """r3d_18's ops at a test's size: a 3-D convolution stem with BatchNorm and ReLU, a MaxPool3d
    (S3D's), a residual block, a strided block with a 1x1x1 shortcut, global pooling and a head."""

    def __init__(self, width=8, classes=10):
        super().__init__()

        def unit(cin, cout, stride=1):
            return [nn.Conv3d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm3d(cout)]

        self.stem = nn.Sequential(nn.Conv3d(3, width, (3, 7, 7), (1, 2, 2), (1, 3, 3), bias=False),
                                  nn.BatchNorm3d(width), nn.ReLU(), nn.MaxPool3d(3, 2, 1))
        self.block = nn.Sequential(*unit(width, width), nn.ReLU(), *unit(width, width))
        self.down = nn.Sequential(*unit(width, 2 * width, 2), nn.ReLU(), *unit(2 * width, 2 * width))
        self.shortcut = nn.Sequential(nn.Conv3d(width, 2 * width, 1, 2, bias=False), nn.BatchNorm3d(2 * width))
        self.head = nn.Linear(2 * width, classes)

    def forward(self, x):
        x = self.stem(x)
        x = torch.relu(self.block(x) + x)
        x = torch.relu(self.down(x) + self.shortcut(x))
        return self.head(x.mean((2, 3, 4)))


class Detector(nn.Module):
    """A torchvision detector on one image [3, H, W], returning its boxes, scores and labels (and
    any other of its outputs named in `extra`, such as Mask R-CNN's masks)."""

    def __init__(self, model, extra=()):
        super().__init__()
        self.model = model
        self.keys = ("boxes", "scores", "labels", *extra)

    def forward(self, image):
        found = self.model([image])[0]
        return tuple(found[key] for key in self.keys)


class Recurrent(nn.Module):
    """A sequence tagger: a 2-layer bidirectional LSTM or GRU (batch first) and a linear head; the
    output mixes the per-step outputs Y with the final hidden state Y_h, so both are checked
    (mix_state=False: the head reads Y alone)."""

    def __init__(self, cell, features=16, hidden=32, classes=8, mix_state=True):
        super().__init__()
        self.rnn = cell(features, hidden, num_layers=2, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, classes)
        self.mix_state = mix_state

    def forward(self, x):
        y, state = self.rnn(x)
        if not self.mix_state:
            return self.head(y)
        h = state[0] if isinstance(state, tuple) else state  # LSTM: (h, c)
        return self.head(y) + h.sum(0).mean(-1, keepdim=True).unsqueeze(1)


def randomize(model, seed=1):
    """Random weights that make every layer matter: zero-initialized weights (ViT's head) drawn
    from N(0, 0.02), and BatchNorm statistics and affine terms random instead of the identity."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2 and float(p.abs().max()) == 0.0:
                p.copy_(torch.randn(p.shape, generator=g) * 0.02)
        for m in model.modules():
            if isinstance(m, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d)):
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)
                m.weight.copy_(torch.rand(m.weight.shape, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)
    return model


def spec(tensor):
    dtype = {torch.float32: "float32", torch.int64: "int64"}[tensor.dtype]
    return {"dtype": dtype, "dims": list(tensor.shape), "data": tensor.flatten().tolist()}


class MissingModule:
    """Stands for a module that is not installed (torchvision on a bare PyTorch): attributes resolve
    to itself, and calling it raises ModuleNotFoundError, so the models that need it are skipped
    while every other entry, and every input drawn, stay as they are."""

    def __init__(self, name):
        self.name = name

    def __getattr__(self, attribute):
        return self

    def __call__(self, *args, **kwargs):
        raise ModuleNotFoundError(f"No module named '{self.name}'")


def zoo(small, image_size=None):
    try:
        import torchvision
    except ImportError:
        torchvision = MissingModule("torchvision")
    import export_examples
    image = image_size or (64 if small else 224)
    g = torch.Generator().manual_seed(3)
    yield ("resnet50", 13, lambda: torchvision.models.resnet50(weights=None),
           (torch.randn(1, 3, image, image, generator=g),), ["x"])
    yield ("mobilenet_v3_large", 14, lambda: torchvision.models.mobilenet_v3_large(weights=None),
           (torch.randn(1, 3, image, image, generator=g),), ["x"])
    # --small: the same VisionTransformer class with 2 layers of width 64 (same ops, 1/300 of the weights).
    vit = (lambda: torchvision.models.vision_transformer.VisionTransformer(
        image_size=image, patch_size=16, num_layers=2, num_heads=4, hidden_dim=64, mlp_dim=128)) if small else \
        (lambda: torchvision.models.vit_b_16(weights=None, image_size=image))
    yield ("vit_b_16", 15, vit, (torch.randn(1, 3, image, image, generator=g),), ["x"])
    yield ("transformer_encoder", 17, lambda: Encoder(64, 4, 2, 128, activation="gelu"),
           (torch.randn(2, 16, 64, generator=g),), ["x"])
    yield ("gpt2", 16, lambda: Gpt2() if small else Gpt2(vocab=5000, context=128, dim=256, heads=8, layers=4),
           (torch.randint(0, 1000, (2, 32), generator=g),), ["ids"])
    yield ("dlrm", 17, lambda: export_examples.Dlrm(), export_examples.dlrm_inputs(),
           ["dense", "indices", "offsets"])
    yield ("lstm", 14, lambda: Recurrent(nn.LSTM), (torch.randn(3, 10, 16, generator=g),), ["x"])
    yield ("gru", 14, lambda: Recurrent(nn.GRU), (torch.randn(3, 10, 16, generator=g),), ["x"])
    # Segmentation heads (bilinear Resize back to the input size) and a Swin transformer (window
    # shifts by Slice/Concat, relative position tables by Gather); older opsets exercise Resize's
    # opset 11 form. --small only shrinks the image.
    segmentation = torchvision.models.segmentation
    yield ("deeplabv3", 12, lambda: segmentation.deeplabv3_mobilenet_v3_large(
        weights=None, weights_backbone=None, aux_loss=False), (torch.randn(1, 3, image, image, generator=g),), ["x"])
    yield ("lraspp", 11, lambda: segmentation.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None),
           (torch.randn(1, 3, image, image, generator=g),), ["x"])
    yield ("fcn", 13, lambda: segmentation.fcn_resnet50(weights=None, weights_backbone=None, aux_loss=False),
           (torch.randn(1, 3, image, image, generator=g),), ["x"])
    yield ("swin_t", 17, lambda: torchvision.models.swin_t(weights=None),
           (torch.randn(1, 3, image, image, generator=g),), ["x"])
    # --small: the same MaxVit class at 64x64 with two one-layer blocks (same ops).
    maxvit = (lambda: torchvision.models.maxvit.MaxVit(
        input_size=(image, image), stem_channels=16, partition_size=2, block_channels=[16, 32], block_layers=[1, 1],
        head_dim=8, stochastic_depth_prob=0.0, num_classes=10)) if small else \
        (lambda: torchvision.models.maxvit_t(weights=None))
    yield ("maxvit_t", 17, maxvit, (torch.randn(1, 3, image, image, generator=g),), ["x"])
    yield ("dcgan", 13, lambda: DcganGenerator(width=8 if small else 64),
           (torch.randn(2 if small else 16, 100, 1, 1, generator=g),), ["z"])
    yield ("r3d_18", 14, lambda: TinyVideoNet() if small else torchvision.models.video.r3d_18(weights=None),
           (torch.randn(1, 3, 4 if small else 8, 32 if small else 112, 32 if small else 112, generator=g),), ["x"])
    detection = torchvision.models.detection
    yield ("ssdlite", 14, lambda: Detector(detection.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None)),
           (torch.rand(3, 320, 320, generator=g),), ["image"])
    yield ("fasterrcnn", 14, lambda: Detector(detection.fasterrcnn_mobilenet_v3_large_320_fpn(
        weights=None, weights_backbone=None, box_score_thresh=0.0)), (torch.rand(3, 320, 320, generator=g),), ["image"])
    yield ("bert_base", 17, lambda: Encoder(768, 12, 12, 3072, activation="gelu"),
           (torch.randn(1, 128, 768, generator=g),), ["x"])
    # Last, so the inputs drawn before it stay as they were.
    yield ("retinanet", 16, lambda: Detector(detection.retinanet_resnet50_fpn(
        weights=None, weights_backbone=None, min_size=320, max_size=320, score_thresh=0.0, detections_per_img=50)),
        (torch.rand(3, 320, 320, generator=g),), ["image"])
    yield ("wav2letter", 14, lambda: Wav2LetterLike(16, 32, 48, 4) if small else Wav2LetterLike(),
           (torch.randn(1, 16 if small else 80, 64 if small else 1000, generator=g),), ["x"])
    at320 = dict(weights=None, weights_backbone=None, min_size=320, max_size=320)
    yield ("maskrcnn", 16, lambda: Detector(detection.maskrcnn_resnet50_fpn(
        box_score_thresh=0.0, box_detections_per_img=20, **at320), extra=("masks",)),
        (torch.rand(3, 320, 320, generator=g),), ["image"])
    yield ("fcos", 16, lambda: Detector(detection.fcos_resnet50_fpn(score_thresh=0.0, detections_per_img=50, **at320)),
           (torch.rand(3, 320, 320, generator=g),), ["image"])
    yield ("ssd300", 16, lambda: Detector(detection.ssd300_vgg16(weights=None, weights_backbone=None, score_thresh=0.0,
                                                                 detections_per_img=50)),
           (torch.rand(3, 300, 300, generator=g),), ["image"])
    # ConvNeXt's blocks (depthwise 7x7 convolution, LayerNorm over channels after a permute, GELU,
    # layer scale) and ResNeXt's grouped 3x3 convolutions (32 groups). --small: the same classes,
    # two stages of one block each.
    convnext = torchvision.models.convnext
    convnext_tiny = (lambda: convnext.ConvNeXt([convnext.CNBlockConfig(16, 32, 1), convnext.CNBlockConfig(32, None, 1)],
                                               num_classes=10)) if small else \
        (lambda: torchvision.models.convnext_tiny(weights=None))
    yield ("convnext_tiny", 17, convnext_tiny, (torch.randn(1, 3, image, image, generator=g),), ["x"])
    resnext = (lambda: torchvision.models.resnet.ResNet(torchvision.models.resnet.Bottleneck, [1, 1, 1, 1], groups=32,
                                                         width_per_group=4, num_classes=10)) if small else \
        (lambda: torchvision.models.resnext50_32x4d(weights=None))
    yield ("resnext50_32x4d", 13, resnext, (torch.randn(1, 3, image, image, generator=g),), ["x"])


def export_onnx(model, inputs, path, opset, input_names, dynamo=False):
    """torch.onnx.export with the TorchScript exporter at `opset`, static shapes, constants folded,
    the one output named "output"; or, `dynamo`, with torch 2.x's default exporter at its own
    default opset (torch.export, onnxscript's optimizer), static shapes."""
    if dynamo:
        torch.onnx.export(model, inputs, path, input_names=input_names, output_names=["output"], dynamo=True,
                          verbose=False)
        return
    torch.onnx.export(model, inputs, path, opset_version=opset, input_names=input_names,
                      output_names=["output"], do_constant_folding=True, dynamo=False)


def exporter_error(error):
    """The cause torch.onnx reports under "## Exception summary", else the message's first line."""
    text = str(error)
    if "## Exception summary" in text:
        text = text.split("## Exception summary", 1)[1]
    causes = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("(Refer")]
    return (causes[0] if causes else type(error).__name__)[:240]


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if not args:
        print(__doc__)
        sys.exit(2)
    out_dir, names = args[0], set(args[1:])
    small = "--small" in sys.argv
    dynamo = "--dynamo" in sys.argv
    image = next((int(a.split("=", 1)[1]) for a in sys.argv[1:] if a.startswith("--image=")), None)
    os.makedirs(out_dir, exist_ok=True)
    for name, opset, make, inputs, input_names in zoo(small, image):
        if names and name not in names:
            continue
        path = os.path.join(out_dir, f"{name}.onnx")
        if os.path.exists(path):
            continue
        torch.manual_seed(0)
        try:
            model = randomize(make()).eval()
        except ModuleNotFoundError as e:
            print(f"skipped {name}: {e}", flush=True)
            continue
        # Gradients stay enabled: under no_grad, TransformerEncoderLayer takes its fused fast path
        # (aten::_transformer_encoder_layer_fwd), which has no ONNX export.
        try:
            export_onnx(model, inputs, path + ".tmp", opset, input_names, dynamo)
        except Exception as error:  # noqa: BLE001 - the exporter's failure, named; the others go on
            if not dynamo:
                raise
            print(f"the dynamo exporter failed on {name}: {exporter_error(error)}", flush=True)
            continue
        with open(os.path.join(out_dir, f"{name}.inputs.json"), "w") as f:
            json.dump({n: spec(t) for n, t in zip(input_names, inputs)}, f)
        os.replace(path + ".tmp", path)
        print(f"wrote {path} ({os.path.getsize(path)} bytes)", flush=True)


if __name__ == "__main__":
    main()
