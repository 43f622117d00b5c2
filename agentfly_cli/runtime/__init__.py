"""The process runtime: malloc tuning, clean shutdown on signals, deadlines, torch devices."""
