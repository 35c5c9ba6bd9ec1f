"""How the shipped drafts were made: prompts, teacher answers, distillation, fine-tuning, the tiny preset."""
