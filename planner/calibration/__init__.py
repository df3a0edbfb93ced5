"""Calibration from one's own benchmarks: result readers, the named factors, their fit and the calibration file."""
