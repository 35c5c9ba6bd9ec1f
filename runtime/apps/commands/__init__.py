"""The commands that run prompts and workloads, compare policies, join remote workers, and replay."""
