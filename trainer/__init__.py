"""PyTorch trainer that streams shards and pre-trains small BERT and GPT models."""
