"""Pure audio helpers: streaming resampling and reading audio files."""
