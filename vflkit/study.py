"""Execute the study notebooks headlessly with papermill: ``python -m vflkit.study``.

``make study`` calls this with every notebook in ``notebooks/``. Each notebook runs from the
project root with ``profile`` and ``device`` injected into its ``parameters`` cell; the executed
copy is written to ``notebooks/_executed/<profile>/`` (not committed), while the notebook itself
writes its tables and figures to ``figures/<paper>/<profile>/`` and its run records to
``results/<profile>/``, so an interrupted study resumes where it stopped.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .config import project_root
from .config import PROFILES


def execute(notebook: Path, *, profile: str, device: str) -> Path:
    """Run one notebook with papermill; returns the executed copy's path."""
    import papermill

    root = project_root()
    out = root / "notebooks" / "_executed" / profile / notebook.name
    out.parent.mkdir(parents=True, exist_ok=True)
    papermill.execute_notebook(
        str(notebook), str(out), parameters={"profile": profile, "device": device},
        cwd=str(root), progress_bar=False, log_output=False,
    )
    return out


def normalize_notebook(path: Path) -> None:
    """Rewrite ``path`` in the form JupyterLab saves it, so that opening a committed notebook
    does not mark it modified and saving it unchanged gives no diff.

    On opening, JupyterLab sets the kernelspec and ``language_info`` to what the running kernel
    reports; on saving it writes through :func:`nbformat.write`. Papermill's run metadata
    (timings per cell) and ipywidgets' saved state only add noise to every diff, and a saved
    progress-bar widget renders as an empty "0%" bar to a reader, so they are dropped.
    """
    import platform

    import nbformat

    nb = nbformat.read(path, as_version=4)
    nb.metadata.pop("widgets", None)
    nb.metadata.pop("papermill", None)
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {
        "codemirror_mode": {"name": "ipython", "version": 3}, "file_extension": ".py",
        "mimetype": "text/x-python", "name": "python", "nbconvert_exporter": "python",
        "pygments_lexer": "ipython3", "version": platform.python_version(),
    }
    for cell in nb.cells:
        cell.metadata.pop("papermill", None)
        cell.metadata.pop("execution", None)
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            data.pop("application/vnd.jupyter.widget-view+json", None)
        # a progress bar's widget output without its widget is an empty box: drop it
        if cell.get("outputs"):
            cell.outputs = [o for o in cell.outputs if not (o.get("output_type") == "display_data" and not o.get("data"))]
    nbformat.write(nb, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path, help="notebooks to execute, in order")
    parser.add_argument("--profile", default="quick", choices=PROFILES)
    parser.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda[:N]")
    args = parser.parse_args(argv)
    for nb in args.notebooks:
        start = time.perf_counter()
        print(f"[study] {nb} (profile={args.profile}, device={args.device}) ...", flush=True)
        out = execute(nb, profile=args.profile, device=args.device)
        print(f"[study] done in {time.perf_counter() - start:.0f} s -> {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
