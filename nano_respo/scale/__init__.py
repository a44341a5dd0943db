"""Scale-out: FSDP2 over torchrun and the chunked log-probs for large vocabularies; never imported by the
single-device step."""
