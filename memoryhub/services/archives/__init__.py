"""Org and domain archives: export an org as a documented file of JSON lines, import one
into the same org or another (docs/reference/archive.md)."""

from .exporting import export_archive
from .format import ArchiveInvalid
from .importing import ImportReport, import_archive

__all__ = ["ArchiveInvalid", "ImportReport", "export_archive", "import_archive"]
