"""Operating the stages: metrics, consumer lag, replay and tail."""
