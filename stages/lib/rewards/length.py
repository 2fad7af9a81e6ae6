"""DAPO's soft overlong punishment (arXiv 2503.14476, eq. 13): no penalty up to
`max_length - buffer` tokens, a linear penalty down to -1 across the buffer, -1 beyond."""


def soft_overlong_punishment(num_tokens: int, max_length: int, buffer: int) -> float:
    if buffer <= 0 or buffer > max_length:
        raise ValueError(f"overlong buffer must be in 1..max_length ({max_length}), got {buffer}")
    if num_tokens <= max_length - buffer:
        return 0.0
    if num_tokens <= max_length:
        return (max_length - buffer - num_tokens) / buffer
    return -1.0
