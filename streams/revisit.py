"""The revisit stage, by the name the design card gives it: the code is :mod:`streams.stages.revisit`."""

from streams.stages.revisit.stage import STAGE, RevisitSettings, RevisitStage

__all__ = ['RevisitStage', 'RevisitSettings', 'STAGE']
