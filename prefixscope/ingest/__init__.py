"""Ingest: request logs in, the canonical ``requests`` table (and ``rejects``) out.

Every input line ends up in exactly one of ``requests`` or ``rejects``; per file,
``sources.lines = accepted + rejected``. No prompt or response text is written anywhere.
"""

from prefixscope.ingest.formats import FORMATS, IngestOptions, LogFormat
from prefixscope.ingest.loader import FileResult, IngestResult, ingest_files

__all__ = ["FORMATS", "FileResult", "IngestOptions", "IngestResult", "LogFormat", "ingest_files"]
