"""Looking inside a model: evaluation, attention maps, head scores, activation patching,
the Fourier spectrum, and the figures and viewer that show them."""
