"""Write docs/reference.md, the library's reference, from the public functions' docstrings.

    python docs/make_reference.py          # writes docs/reference.md
    python docs/make_reference.py --check  # exit 1 if docs/reference.md is not what it writes

The reference lists, module by module, the names a script uses: the layers
(``from convcli import ...``), reading and writing images, the value mappings,
the kernels and the batch run. Each entry is the object's signature and its
docstring as written in the code.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path

REFERENCE = Path(__file__).resolve().parent / "reference.md"

SECTIONS = [
    (
        "The layers",
        "convcli",
        [
            "zero_pad",
            "conv_single_step",
            "conv_forward",
            "conv_backward",
            "pool_forward",
            "pool_backward",
            "create_mask_from_window",
            "distribute_value",
            "pad_images",
            "depthwise_conv_forward",
            "depthwise_conv_backward",
        ],
    ),
    (
        "Reading images",
        "convcli.io.images",
        ["read_image", "read_stack", "open_image", "Picture", "check_pixels"],
    ),
    (
        "Writing images",
        "convcli.io.image_files",
        ["save_levels", "save_npy", "save_frames", "frame_writer", "written_by_convcli"],
    ),
    ("Images larger than memory", "convcli.io.regions", ["open_regions"]),
    (
        "Values to levels",
        "convcli.levels.mapping",
        ["map_levels", "to_levels", "robust_top", "luminance", "LevelScale"],
    ),
    (
        "Kernels",
        "convcli.kernels",
        [
            "get_kernel",
            "list_kernels",
            "parse_kernel_spec",
            "load_kernel_file",
            "rotate_kernel",
            "Kernel",
        ],
    ),
    ("The batch run", "convcli.app.run", ["run_batch", "RunOptions", "Reporter"]),
]


def _entry(module_name: str, name: str) -> str:
    obj = getattr(importlib.import_module(module_name), name)
    try:
        signature = f"{name}{inspect.signature(obj)}"
    except (TypeError, ValueError):
        signature = name
    kind = "class" if inspect.isclass(obj) else "function"
    doc = inspect.getdoc(obj) or ""
    return (
        f"### `{module_name}.{name}`\n\n```python\n{kind} {signature}\n```\n\n```text\n{doc}\n```\n"
    )


def reference() -> str:
    """The text of docs/reference.md."""
    parts = [
        "# Library reference\n",
        "Made by `python docs/make_reference.py` from the docstrings in the code; "
        "[library.md](library.md) shows how the pieces fit.\n",
    ]
    for title, module_name, names in SECTIONS:
        parts.append(f"## {title}\n")
        parts.extend(_entry(module_name, name) for name in names)
    return "\n".join(parts)


def main(argv: list[str]) -> int:
    text = reference()
    if "--check" in argv:
        if not REFERENCE.exists() or REFERENCE.read_text(encoding="utf-8") != text:
            print(
                f"{REFERENCE} is not up to date: run python docs/make_reference.py", file=sys.stderr
            )
            return 1
        return 0
    REFERENCE.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
