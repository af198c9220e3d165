"""Image inputs and outputs (ct.ImageType) of an ML program: what they are, and pictures to tensors and back as Core
ML converts them.

An ImageType feature is an image in the model description (colour layout, size) and a plain tensor in the program:
(1, C, H, W), fp32 for RGB, BGR and GRAYSCALE, fp16 for GRAYSCALE_FLOAT16 (C = 3 or 1). coremltools bakes the
ImageType's `scale` and `bias` into the graph as its leading ops, `mul` then `add` on the input (named
`<input>__scaled__`, `<input>__biased__`, the names read here; coremltools' docs "Image Input and Output",
https://apple.github.io/coremltools/docs-guides/source/image-inputs.html): the program computes scale * pixel + bias
on 0..255 pixel values. `describe` reads both: layout and size from the description, scale and bias from the ops.

Pictures to tensors (`to_tensor`), as Core ML takes them (coremltools' `predict` takes a PIL image; the same page):
- a picture file (PNG, JPEG, anything Pillow opens) or a PIL image: converted to mode "RGB" for an RGB or BGR input,
  "L" for GRAYSCALE, "F" (float pixels) for GRAYSCALE_FLOAT16; its size must be one the input accepts (no resizing);
  a picture of 16- or 32-bit samples (a 16-bit PNG) is refused unless it is already the input's mode;
- an H x W x C array (or H x W for grayscale) is a picture in RGB order, as PIL holds it: uint8 as pictures are,
  or float pixel values (0..255, anything outside refused; any value for GRAYSCALE_FLOAT16), taken as they are;
- for a BGR input the channels are reversed (pictures are RGB, the model takes B, G, R); then HWC -> (1, C, H, W);
- anything else (e.g. a (1, C, H, W) float array) is already the program's tensor, in the model's own channel order,
  and passes unchanged.
Tensors to pictures (`to_picture`, an ImageType output): (1, C, H, W) -> H x W x C in RGB order (BGR reversed),
clipped to [0, 255] and rounded to uint8 (GRAYSCALE_FLOAT16: float32 H x W); `as_pil` wraps one in a PIL image.
The rounding of Core ML's own float-to-pixel conversion is not documented; rounding to nearest is this module's
choice and is not checked against a Mac.

Pillow is imported only when a picture file or PIL image is read or made.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...core.errors import HarnessError

PICTURE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")
LAYOUTS = {10: "GRAYSCALE", 20: "RGB", 30: "BGR", 40: "GRAYSCALE_FLOAT16"}  # FeatureTypes.proto ColorSpace
PIL_MODES = {"RGB": "RGB", "BGR": "RGB", "GRAYSCALE": "L", "GRAYSCALE_FLOAT16": "F"}
WIDE_MODES = ("I", "F", "I;16", "I;16L", "I;16B", "I;16N")  # Pillow modes of 16- and 32-bit samples


class ImageInputError(HarnessError):
    """A picture that does not fit an image input (size, channels, unreadable file)."""


@dataclass(frozen=True)
class ImageInfo:
    name: str
    layout: str  # RGB, BGR, GRAYSCALE, GRAYSCALE_FLOAT16
    height: int  # the default size (the description's height, width)
    width: int
    sizes: tuple[tuple[int, int], ...] = ()  # enumerated (height, width) sizes
    height_range: tuple[int, int | None] | None = None  # ranged size: (lower, upper or None: unbounded)
    width_range: tuple[int, int | None] | None = None
    scale: tuple[float, ...] = ()  # the graph's leading mul / add on the input (empty: none)
    bias: tuple[float, ...] = ()

    @property
    def channels(self) -> int:
        return 3 if self.layout in ("RGB", "BGR") else 1

    @property
    def size_kind(self) -> str:
        return "enumerated" if self.sizes else "ranged" if self.height_range else "fixed"

    def accepts_size(self, height: int, width: int) -> bool:
        if self.sizes:
            return (height, width) in self.sizes
        if self.height_range:
            return all(lo <= d and (hi is None or d <= hi)
                       for d, (lo, hi) in ((height, self.height_range), (width, self.width_range)))
        return (height, width) == (self.height, self.width)

    def sizes_text(self) -> str:
        if self.sizes:
            return "one of " + ", ".join(f"{h}x{w}" for h, w in self.sizes)
        if self.height_range:
            def span(lo, hi):
                return f"{lo}..{'inf' if hi is None else hi}"
            return f"{span(*self.height_range)} x {span(*self.width_range)}"
        return f"{self.height}x{self.width}"

    # the interface npz_inputs.read_inputs asks of an input: a picture array (H, W[, C]) or the program's tensor
    def accepts(self, shape) -> bool:
        shape = tuple(int(d) for d in shape)
        if len(shape) == 4:
            return shape[:2] == (1, self.channels) and self.accepts_size(*shape[2:])
        if len(shape) == 3 and shape[2] == self.channels or len(shape) == 2 and self.channels == 1:
            return self.accepts_size(*shape[:2])
        return False

    def largest(self) -> tuple[int | None, ...]:
        if self.sizes:
            return (1, self.channels, max(h for h, _ in self.sizes), max(w for _, w in self.sizes))
        if self.height_range:
            return (1, self.channels, self.height_range[1], self.width_range[1])
        return (1, self.channels, self.height, self.width)

    def expected(self) -> str:
        return (f"a {self.layout} picture of {self.sizes_text()} (H x W x {self.channels} uint8) or "
                f"(1, {self.channels}, H, W)")

    def describe(self) -> dict:
        out = {"layout": self.layout, "size": self.size_kind, "sizes": self.sizes_text(),
               "preprocessing": {"scale": list(self.scale), "bias": list(self.bias)}}
        return out

    def preprocessing_text(self) -> str:
        if not self.scale and not self.bias:
            return "no scale or bias in the graph (pixels enter as they are" + (
                ")" if self.layout == "GRAYSCALE_FLOAT16" else ": 0..255)")
        scale = _values_text(self.scale) if self.scale else "1"
        bias = _values_text(self.bias) if self.bias else "0"
        return f"the graph computes {scale} * pixel + {bias}"


def _values_text(values) -> str:
    values = [float(f"{v:.6g}") for v in values]
    return str(values[0]) if len(set(values)) == 1 else str(values)


def _flat(value) -> tuple[float, ...]:
    return tuple(float(v) for v in np.asarray(value, dtype=np.float64).reshape(-1))


def _size_range(size_range) -> tuple[int, int | None]:
    return int(size_range.lowerBound), None if size_range.upperBound < 0 else int(size_range.upperBound)


def _preprocessing(function, name: str) -> tuple[tuple, tuple]:
    """The scale and bias coremltools inserted on input `name`: the `mul` named <name>__scaled__ and the `add` named
    <name>__biased__ right after the input, each by a constant (a model's own first ops are not mistaken for them)."""
    scale: tuple = ()
    bias: tuple = ()
    var = function.inputs.get(name)
    for op_type, suffix in (("mul", "__scaled__"), ("add", "__biased__")):
        if var is None or len(var.child_ops) != 1:
            break
        op = var.child_ops[0]
        if op.op_type != op_type or op.name != f"{name}{suffix}":
            continue  # coremltools leaves out the mul when scale is 1, the add when bias is 0
        other = op.y if op.x is var else op.x
        if other is var or other.val is None:
            break
        if op_type == "mul":
            scale = _flat(other.val)
        else:
            bias = _flat(other.val)
        var = op.outputs[0]
    return scale, bias


def image_feature(feature, function=None) -> ImageInfo | None:
    """ImageInfo of one description feature (input or output), or None when it is not an image."""
    if feature.type.WhichOneof("Type") != "imageType":
        return None
    image = feature.type.imageType
    layout = LAYOUTS.get(int(image.colorSpace))
    if layout is None:
        raise ImageInputError(f"image {feature.name!r}: colour space {int(image.colorSpace)} is not one "
                              "Core ML defines")
    sizes, height_range, width_range = (), None, None
    flexibility = image.WhichOneof("SizeFlexibility")
    if flexibility == "enumeratedSizes":
        sizes = tuple((int(s.height), int(s.width)) for s in image.enumeratedSizes.sizes)
    elif flexibility == "imageSizeRange":
        height_range = _size_range(image.imageSizeRange.heightRange)
        width_range = _size_range(image.imageSizeRange.widthRange)
    scale, bias = _preprocessing(function, feature.name) if function is not None else ((), ())
    return ImageInfo(feature.name, layout, int(image.height), int(image.width), sizes, height_range, width_range,
                     scale, bias)


def function_description(spec, function_name: str | None):
    """The features of one function: a multifunction package describes each function apart and leaves the model's
    own description.input / output empty."""
    for described in spec.description.functions:
        if described.name == function_name:
            return described
    return spec.description


def image_features(spec, function_name: str, function=None) -> tuple[dict[str, ImageInfo], dict[str, ImageInfo]]:
    """({input name: ImageInfo}, {output name: ImageInfo}) of one function of a model spec (None: no spec)."""
    if spec is None:
        return {}, {}
    description = function_description(spec, function_name)
    inputs = {f.name: info for f in description.input if (info := image_feature(f, function)) is not None}
    outputs = {f.name: info for f in description.output if (info := image_feature(f)) is not None}
    return inputs, outputs


def _is_pil(value) -> bool:
    return type(value).__module__.startswith("PIL.")


def picture_bound(info: ImageInfo) -> int:
    """Bytes a picture file for this input may have: its largest size as raw float32 pixels, plus headers (a PNG or
    JPEG of a picture is smaller than that in practice; an unbounded range falls back to the host bound)."""
    from ...core.limits import ZIP_OVERHEAD_BYTES, host_memory_bound

    _, channels, height, width = info.largest()
    if height is None or width is None:
        return host_memory_bound()
    return min(host_memory_bound(), height * width * channels * 4 + ZIP_OVERHEAD_BYTES)


def read_picture(path: Path, info: ImageInfo) -> np.ndarray:
    """A picture file as H x W x C uint8 (RGB), H x W uint8 (L) or H x W float32 (F), per the input's layout. The
    file is bounded (picture_bound) and its size checked from its header before a pixel is decoded."""
    from PIL import Image, UnidentifiedImageError

    from ...core.regular_files import open_regular

    with open_regular(path, picture_bound(info), "picture file", error=ImageInputError) as handle:
        try:
            with Image.open(handle) as picture:
                width, height = picture.size
                if not info.accepts_size(height, width):
                    raise ImageInputError(f"{path}: a {height}x{width} picture; input {info.name!r} takes "
                                          f"{info.sizes_text()} (height x width; pictures are not resized)")
                try:
                    return _pil_array(picture, info)
                except ImageInputError as problem:
                    raise ImageInputError(f"{path}: {problem}") from None
        except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as problem:
            raise ImageInputError(f"{path}: not a picture Pillow can read ({str(problem)[:80]})") from None


def _pil_array(picture, info: ImageInfo) -> np.ndarray:
    mode = PIL_MODES[info.layout]
    if picture.mode in WIDE_MODES and picture.mode != mode:
        # Pillow's convert to "L" / "RGB" clips samples above 255 instead of scaling them (a 16-bit PNG turns white),
        # and how Core ML maps wide samples to its 8-bit pixels is not documented: refused, not guessed
        takes = "float pictures (mode 'F')" if mode == "F" else f"8-bit pictures (mode {mode!r})"
        raise ImageInputError(f"input {info.name!r}: a picture of mode {picture.mode!r} (samples wider than 8 bits); "
                              f"the {info.layout} input takes {takes}: convert it first")
    return np.asarray(picture if picture.mode == mode else picture.convert(mode))


def to_tensor(info: ImageInfo, value) -> np.ndarray:
    """The program's (1, C, H, W) tensor for a picture (module docstring); other arrays pass unchanged."""
    if isinstance(value, (str, Path)):
        value = read_picture(Path(value), info)
    elif _is_pil(value):
        value = _pil_array(value, info)
    array = np.asarray(value)
    if array.ndim not in (2, 3) or array.dtype.kind not in "fiub":
        return array  # the program's own tensor (channels first, model channel order): checked by the executor
    if array.ndim == 2:
        array = array[:, :, None]  # (H, W) -> (H, W, 1)
    height, width, channels = array.shape
    if channels != info.channels:
        raise ImageInputError(f"input {info.name!r}: a picture with {channels} channel(s); the {info.layout} input "
                              f"takes {info.channels}")
    if not info.accepts_size(height, width):
        raise ImageInputError(f"input {info.name!r}: a {height}x{width} picture; the input takes {info.sizes_text()} "
                              "(height x width; pictures are not resized)")
    if info.layout != "GRAYSCALE_FLOAT16" and array.size and not (0 <= array.min() and array.max() <= 255):
        # an 8-bit picture holds 0..255: a uint16 picture array or a negative value would run silently as pixels
        # no Core ML picture can have
        raise ImageInputError(f"input {info.name!r}: a picture array with values in [{array.min()}, {array.max()}]; "
                              f"the {info.layout} input takes 8-bit pixel values 0..255 (or give the (1, C, H, W) "
                              "tensor the program takes)")
    if info.layout == "BGR":
        array = array[:, :, ::-1]  # pictures are RGB; the model takes B, G, R
    return np.ascontiguousarray(array.transpose(2, 0, 1)[None], dtype=np.float32)  # (1, C, H, W)


def to_picture(info: ImageInfo, tensor) -> np.ndarray:
    """An image output's (1, C, H, W) tensor as a picture array: H x W x 3 uint8 RGB, H x W uint8, or H x W float32."""
    array = np.asarray(tensor, dtype=np.float32)
    if array.ndim == 4:
        array = array[0]
    chw = array.reshape((-1,) + array.shape[-2:])  # (C, H, W)
    if info.layout == "GRAYSCALE_FLOAT16":
        return chw[0].copy()
    if info.layout == "BGR":
        chw = chw[::-1]
    hwc = np.clip(np.rint(chw.transpose(1, 2, 0)), 0, 255).astype(np.uint8)
    return hwc[:, :, 0] if info.channels == 1 else hwc


def as_pil(picture: np.ndarray):
    """A picture array (to_picture) as a PIL image (mode RGB, L or F), what coremltools' predict returns."""
    from PIL import Image

    return Image.fromarray(picture)
