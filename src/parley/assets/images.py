"""Avatar images: decoded and re-encoded with Pillow, so only clean pixels are ever stored.

Only PNG, JPEG and WebP (by decoded format) are accepted. The image is turned upright by its EXIF
orientation, reduced to fit 512×512 and written again without any metadata (EXIF, XMP, ICC, text).
"""

from __future__ import annotations

import io
from dataclasses import dataclass

from PIL import Image, ImageOps, UnidentifiedImageError

from parley.assets.sniff import invalid_field
from parley.kit.errors import PayloadTooLarge, UnsupportedMediaType

AVATAR_SIZE = (512, 512)
# Pillow refuses images over twice this many pixels when opening them; we refuse anything over it.
MAX_PIXELS = 25_000_000
Image.MAX_IMAGE_PIXELS = min(Image.MAX_IMAGE_PIXELS or MAX_PIXELS, MAX_PIXELS)

_FORMATS = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp"}


@dataclass(frozen=True)
class ProcessedImage:
    data: bytes
    content_type: str
    width: int
    height: int


def _too_large(width: int, height: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"The image is {width}×{height} pixels; images may have at most {MAX_PIXELS:,} pixels."
    )


def process_avatar(data: bytes) -> ProcessedImage:
    """Decode, check, orient, shrink and re-encode. Blocking: run it in a worker thread."""
    try:
        image = Image.open(io.BytesIO(data), formats=list(_FORMATS))
    except Image.DecompressionBombError as exc:
        raise PayloadTooLarge(f"The image has too many pixels; at most {MAX_PIXELS:,} are allowed.") from exc
    except UnidentifiedImageError as exc:
        raise UnsupportedMediaType("Avatars must be PNG, JPEG or WebP images.") from exc
    except (OSError, ValueError, SyntaxError) as exc:
        raise invalid_field("file", "The image cannot be read; it is damaged or incomplete.") from exc
    with image:
        fmt = image.format or ""
        if fmt not in _FORMATS:
            raise UnsupportedMediaType("Avatars must be PNG, JPEG or WebP images.")
        width, height = image.size
        if width * height > MAX_PIXELS:
            raise _too_large(width, height)
        if width < 1 or height < 1:
            raise invalid_field("file", "The image has no pixels.")
        try:
            image.load()
            upright = ImageOps.exif_transpose(image)
            has_alpha = upright.mode in ("RGBA", "LA", "PA") or "transparency" in upright.info
            clean = upright.convert("RGBA" if has_alpha and fmt != "JPEG" else "RGB")
            clean.info = {}  # no EXIF, XMP, ICC profile or text chunks survive
            clean.thumbnail(AVATAR_SIZE, Image.Resampling.LANCZOS)
            out = io.BytesIO()
            if fmt == "JPEG":
                clean.save(out, format="JPEG", quality=88, optimize=True)
            elif fmt == "WEBP":
                clean.save(out, format="WEBP", quality=85, method=4)
            else:
                clean.save(out, format="PNG", optimize=True)
        except Image.DecompressionBombError as exc:
            raise _too_large(width, height) from exc
        except (OSError, ValueError, SyntaxError, EOFError) as exc:
            raise invalid_field("file", "The image cannot be decoded; it is damaged or incomplete.") from exc
        return ProcessedImage(out.getvalue(), _FORMATS[fmt], clean.width, clean.height)
