"""Text helpers shared by grounding and web search: the lexical tokenizer and index, jieba's
dictionary tables, word frequencies."""
