"""Calibrate a hardware profile's assumptions from a few latencies measured on a board.

``npuflow-calibrate hardware=rk3588 measurements=my_board.csv`` fits the parameters the
profile lists under ``calibrate:`` (with bounds) so that npuflow's predicted latencies
match the measured ones, and writes ``<name>_calibrated.yaml`` with a report. Modules:
``measurements`` (the CSV), ``evaluate`` (one row's predicted latency for a parameter
vector: compile + simulate only), ``fit`` (scipy least squares, leave-one-out),
``report`` and ``cli``.
"""
