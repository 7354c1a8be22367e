"""The URL stage, by the name the design card gives it: the code is :mod:`streams.stages.url_dedup`."""

from streams.stages.url_dedup.stage import STAGE, UrlDedupStage

__all__ = ['UrlDedupStage', 'STAGE']
