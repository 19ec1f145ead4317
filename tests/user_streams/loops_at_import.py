"""A module that never finishes importing (a user's bug)."""

while True:
    pass
