"""General (non-reasoning) instructions with reference answers: the tiny stand-in for the paper's
writing, factual QA, translation and self-cognition data."""

import random

ASSISTANT_NAME = "TinyR1"

CAPITALS = {
    "France": "Paris", "Spain": "Madrid", "Italy": "Rome", "Germany": "Berlin", "Japan": "Tokyo",
    "Egypt": "Cairo", "Peru": "Lima", "Kenya": "Nairobi", "Canada": "Ottawa", "Chile": "Santiago",
    "Norway": "Oslo", "Greece": "Athens", "India": "New Delhi", "China": "Beijing", "Cuba": "Havana",
    "Poland": "Warsaw", "Austria": "Vienna", "Ireland": "Dublin", "Portugal": "Lisbon", "Mexico": "Mexico City",
    "Brazil": "Brasilia", "Sweden": "Stockholm", "Finland": "Helsinki", "Ghana": "Accra",
}
TRANSLATIONS = {  # English -> (French, Spanish, German)
    "dog": ("chien", "perro", "Hund"), "cat": ("chat", "gato", "Katze"), "house": ("maison", "casa", "Haus"),
    "water": ("eau", "agua", "Wasser"), "book": ("livre", "libro", "Buch"), "bread": ("pain", "pan", "Brot"),
    "sun": ("soleil", "sol", "Sonne"), "moon": ("lune", "luna", "Mond"), "tree": ("arbre", "arbol", "Baum"),
    "friend": ("ami", "amigo", "Freund"), "school": ("ecole", "escuela", "Schule"), "red": ("rouge", "rojo", "rot"),
    "green": ("vert", "verde", "gruen"), "city": ("ville", "ciudad", "Stadt"), "fish": ("poisson", "pez", "Fisch"),
    "milk": ("lait", "leche", "Milch"), "door": ("porte", "puerta", "Tuer"), "car": ("voiture", "coche", "Auto"),
}
LANGUAGES = ("French", "Spanish", "German")
WORDS = ["river", "garden", "planet", "window", "music", "winter", "market", "forest", "candle", "bridge",
         "rabbit", "ladder", "pepper", "silver", "harbor", "thunder", "meadow", "pocket", "lantern", "violin"]
COLORS = ["red", "blue", "green", "small", "quiet", "happy", "old", "bright"]
ANIMALS = ["fox", "owl", "horse", "whale", "tiger", "duck", "goat", "bear"]
SELF_QUESTIONS = ["Who are you?", "What is your name?", "Introduce yourself.", "Which model are you?",
                  "Tell me about yourself.", "Who made you?"]


def _qa(rng):
    country = rng.choice(sorted(CAPITALS))
    return "qa", f"What is the capital of {country}?", f"The capital of {country} is {CAPITALS[country]}."


def _translation(rng):
    word = rng.choice(sorted(TRANSLATIONS))
    index = rng.randrange(len(LANGUAGES))
    return ("translation", f"Translate the word '{word}' into {LANGUAGES[index]}.",
            f"In {LANGUAGES[index]}, '{word}' is '{TRANSLATIONS[word][index]}'.")


def _writing(rng):
    kind = rng.randrange(3)
    if kind == 0:
        word = rng.choice(WORDS)
        return "writing", f"Write the word '{word}' in capital letters.", word.upper()
    if kind == 1:
        word = rng.choice(WORDS)
        return "writing", f"Spell the word '{word}' backwards.", word[::-1]
    color, animal = rng.choice(COLORS), rng.choice(ANIMALS)
    return ("writing", f"Write one sentence about a {color} {animal}.",
            f"The {color} {animal} walks slowly through the {rng.choice(WORDS)}.")


def _self_cognition(rng):
    question = rng.choice(SELF_QUESTIONS)
    return ("self_cognition", question,
            f"I am {ASSISTANT_NAME}, a small reasoning model trained with the r1-pipeline recipe.")


GENERATORS = (_qa, _translation, _writing, _self_cognition)
DOMAINS = ("qa", "translation", "writing", "self_cognition")


def make_instruction(rng: random.Random) -> tuple[str, str, str]:
    """Returns (domain, prompt, reference)."""
    return rng.choice(GENERATORS)(rng)
