"""The page stage, by the name the design card gives it: the code is :mod:`streams.stages.content_seen`."""

from streams.stages.content_seen.stage import STAGE, ContentSeenSettings, ContentSeenStage

__all__ = ['ContentSeenStage', 'ContentSeenSettings', 'STAGE']
