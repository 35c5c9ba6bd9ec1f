"""`specsched models`: pulling models, training and evaluating drafts."""
