"""Tree-of-Thoughts BFS (SEED Algorithm 1) whose thought generation and state evaluation run on the runtime."""
