"""What a stage's settings name, resolved once per settings object: the model's shape (from
``model`` and ``model_config``) and the GPU's spec (from ``gpu``). A file behind a name, a
config.json or a GPU file, is read once, so every part of one run prices what it held then, even
if it changes meanwhile. Mixed into the frozen settings dataclasses, which declare the fields."""

from __future__ import annotations

from functools import cached_property

from prefixscope.analysis.cost.choice import device
from prefixscope.analysis.cost.gpus import GpuSpec
from prefixscope.analysis.cost.models import ModelShape, resolve_model


class ResolvesModel:
    @cached_property
    def shape(self) -> ModelShape:
        """``model`` (the shape of ``model_config`` where given), resolved once."""
        return resolve_model(self.model, self.model_config)  # type: ignore[attr-defined]


class ResolvesGpu:
    @cached_property
    def device(self) -> GpuSpec | None:
        """``gpu`` as given or as resolved already, once (None: ``cpu``)."""
        return device(self.gpu)  # type: ignore[attr-defined]
