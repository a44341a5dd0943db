"""Research reporting: the tables, intervals, claims and figures of research/toy/ and the tiny-Qwen3 studies."""
