"""What a stage's settings name, resolved once per settings object: the model's shape (from
``model`` and ``model_config``), the GPU's spec (from ``gpu``) and the prices (from ``prices``).
A file behind a name, a config.json, a GPU file or a prices file, is read once, so every part of
one run prices what it held then, even if it changes meanwhile. Mixed into the frozen settings
dataclasses, which declare the fields."""

from __future__ import annotations

from functools import cached_property

from prefixscope.analysis.cost.choice import device
from prefixscope.analysis.cost.gpus import GpuSpec
from prefixscope.analysis.cost.models import ModelShape, resolve_model
from prefixscope.analysis.cost.prices import Prices, load_prices


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


class ResolvesPrices:
    @cached_property
    def price_table(self) -> Prices:
        """``prices`` as given or read once (the defaults where None)."""
        given = self.prices  # type: ignore[attr-defined]
        return given if isinstance(given, Prices) else load_prices(given)
