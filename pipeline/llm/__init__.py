"""Language models: a decoder from its config.json, its phases graph, prefill and decode
timed from the compiled phases, and a trained proxy for what a precision costs."""
