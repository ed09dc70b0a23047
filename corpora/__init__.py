"""Source readers and text cleaners: pure Python, no Beam inside."""
