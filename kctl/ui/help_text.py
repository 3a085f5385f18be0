"""A command's ``--help`` as plain text, the same whatever Typer version is installed.

Typer's own rendering changes between its releases (Rich boxes whose markup eats
``[workload]`` and ``kctl[spark]``, Python types such as ``<list[Path]>`` as value
names), so kctl renders help itself from the Click parameters Typer builds: the value
of an option is shown perf-test style as its name in capitals (``--num-records
NUM-RECORDS``) unless the command names it (``-X NAME=VALUE``); text is never
interpreted as markup; long lines wrap at the terminal's width, or at 100 columns
when stdout is not a terminal. Nothing here imports Rich, so help stays fast.
"""

from __future__ import annotations

import inspect
import shutil
import sys
import textwrap
from typing import Any

__all__ = ["metavar_of", "render_help"]


def metavar_of(param: Any) -> str:
    """The value's name: the command's own, else the long option name in capitals."""
    if getattr(param, "metavar", None):
        return str(param.metavar)
    if param.param_type_name == "argument":
        return param.name.upper()
    if list(param.opts) == ["-X"]:
        return "NAME=VALUE"        # kctl's -X, kcat's and librdkafka's spelling for a property
    longs = [o for o in param.opts if o.startswith("--")]
    return (longs[0][2:] if longs else param.name).upper()


def _usage_piece(param: Any) -> str:
    name = metavar_of(param) + ("..." if param.nargs == -1 else "")
    return name if param.required else f"[{name}]"


def _default_text(param: Any) -> str | None:
    show = getattr(param, "show_default", True)
    if show is False or param.required:
        return None
    if isinstance(show, str):
        return show
    default = param.default
    if getattr(param, "is_flag", False):
        if getattr(param, "secondary_opts", None):
            return param.opts[0] if default else param.secondary_opts[0]
        return None
    if default is None or default == "" or default == [] or default == () or callable(default):
        return None
    if isinstance(default, list | tuple):
        return ", ".join(str(d) for d in default)
    return str(default)


def _width() -> int:
    if sys.stdout.isatty():
        return max(60, min(shutil.get_terminal_size().columns, 120))
    return 100


def _rows(title: str, rows: list[tuple[str, str]], width: int) -> list[str]:
    if not rows:
        return []
    out = ["", f"{title}:"]
    col = min(max(len(left) for left, _ in rows) + 4, 34)
    for left, text in rows:
        body = textwrap.wrap(text, max(30, width - col)) or [""]
        if len(left) + 4 > col:
            out.append(f"  {left}")
            out.extend(" " * col + line for line in body)
        else:
            out.append(f"  {left:<{col - 2}}{body[0]}")
            out.extend(" " * col + line for line in body[1:])
    return out


def render_help(command: Any, prog: str) -> str:
    width = _width()
    params = [p for p in command.params
              if not getattr(p, "hidden", False) and "--help" not in getattr(p, "opts", ())]
    args = [p for p in params if p.param_type_name == "argument"]
    opts = [p for p in params if p.param_type_name != "argument"]
    usage = " ".join([f"Usage: {prog}", "[OPTIONS]"] + [_usage_piece(a) for a in args])
    lines = [usage, ""]
    doc = inspect.cleandoc(command.help or "")
    for para in doc.split("\n\n"):
        if para.strip():
            lines.extend(textwrap.wrap(" ".join(para.split()), width - 2,
                                       initial_indent="  ", subsequent_indent="  "))
            lines.append("")
    lines.pop()
    arg_rows = [(metavar_of(a) + ("..." if a.nargs == -1 else ""), a.help or "") for a in args
                if getattr(a, "help", None)]
    opt_rows = []
    for p in opts:
        names = ", ".join(sorted(p.opts, key=len))
        if getattr(p, "secondary_opts", None):
            names += " / " + ", ".join(p.secondary_opts)
        if not getattr(p, "is_flag", False) and not getattr(p, "count", False):
            names += f" {metavar_of(p)}"
            if getattr(p, "nargs", 1) == -1:
                names += "..."
        text = p.help or ""
        default = _default_text(p)
        if default is not None:
            text += f" (default: {default})"
        if p.required:
            text += " (required)"
        opt_rows.append((names, text))
    opt_rows.append(("-h, --help", "Show this message and exit."))
    lines += _rows("Arguments", arg_rows, width) + _rows("Options", opt_rows, width)
    return "\n".join(lines)
