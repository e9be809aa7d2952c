"""tessel-tune: schedules chosen by measurement (docs/tools/tessel-tune.md)."""
