"""npuflow's orchestration layer: configs, stages, runner, CLI (knows ops and hardware)."""
