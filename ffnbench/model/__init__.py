"""What a model is: the FFN variants and their sizing, the decoder-only model, parameter and
FLOP counts, and the documents' reference models. Imports nothing of ffnbench but errors."""
