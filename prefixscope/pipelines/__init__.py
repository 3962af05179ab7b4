"""Pipelines: Prefect flows that sequence the library's stages. The only package that imports
Prefect; every task is a thin call to a plain library function.

Importing this package sets quiet, offline defaults for Prefect (see :mod:`.settings`) before
Prefect itself is imported; an explicit environment variable always wins.
"""

from prefixscope.pipelines import settings

settings.apply_defaults()
