"""Log formats: each turns a batch of numbered input rows into canonical fields or rejects.

A format is a small object behind the :class:`LogFormat` protocol, registered by name in
:data:`FORMATS`; adding one never touches the loader. Every format returns tables of
:data:`STAGE_SCHEMA`: one row per input row, ``reason`` NULL when it is accepted.
"""

from __future__ import annotations

from prefixscope.ingest.formats.agent import AgentJson
from prefixscope.ingest.formats.bailian import Bailian
from prefixscope.ingest.formats.base import (
    DEFAULT_START,
    DEFAULT_TENANT,
    STAGE_SCHEMA,
    IngestOptions,
    LogFormat,
)
from prefixscope.ingest.formats.mooncake import Mooncake
from prefixscope.ingest.formats.openai import OpenAI
from prefixscope.ingest.formats.otlp import Otlp
from prefixscope.ingest.formats.tokens import Tokens

FORMATS: dict[str, LogFormat] = {
    f.name: f for f in (Mooncake(), Bailian(), OpenAI(), Otlp(), Tokens(), AgentJson())
}

__all__ = [
    "DEFAULT_START",
    "DEFAULT_TENANT",
    "FORMATS",
    "STAGE_SCHEMA",
    "IngestOptions",
    "LogFormat",
]
