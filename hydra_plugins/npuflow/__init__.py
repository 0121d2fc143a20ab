"""Hydra plugin hook: Hydra imports every ``hydra_plugins.*`` module at start-up, so this
registers npuflow's config schemas for any Hydra composition of ``conf/``, including DVC's
(``dvc exp run -S``), which never imports npuflow's CLI."""

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

from pipeline.configuration.schema import register_configs

register_configs()


class NpuflowSearchPath(SearchPathPlugin):
    """Adds nothing to the search path; exists so Hydra's plugin scan imports this module."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        return None
