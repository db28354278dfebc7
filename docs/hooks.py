"""mkdocs hook: serve the committed figures of ``results-full/`` with the site, so the study
pages show the figures that the full runs wrote (nothing is copied into ``docs/``)."""

from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent


def on_files(files, config):
    """Add every PNG under ``results-full/`` as ``results-full/...`` of the site."""
    for png in sorted((ROOT / "results-full").rglob("*.png")):
        files.append(File(str(png.relative_to(ROOT)), str(ROOT), config["site_dir"],
                          config["use_directory_urls"]))
    return files
