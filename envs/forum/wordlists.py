"""Hand-written word lists the forum seeder draws from.

Kept apart from `seed.py` so the generator reads as logic and this file as data. Written by hand (no Faker) so the
seeded text never changes between library versions: tasks quote it verbatim.
"""

from __future__ import annotations

# name -> (title, description, nouns the topic talks about, activities people do)
FORUMS: dict[str, tuple[str, str, list[str], list[str]]] = {
    "books": (
        "Books",
        "Novels, non-fiction and everything you read between the covers.",
        ["fantasy trilogy", "mystery novel", "poetry collection", "graphic novel", "history book", "sci-fi series",
         "audiobook", "e-reader", "library card", "book club pick", "short story anthology", "memoir"],
        ["reading before bed", "annotating margins", "rereading classics", "joining a book club",
         "tracking my reading", "buying used books"],
    ),
    "gaming": (
        "Gaming",
        "Video games, board games and the hardware to play them.",
        ["controller", "open-world RPG", "indie platformer", "gaming headset", "strategy game", "co-op shooter",
         "handheld console", "mechanical keyboard", "racing game", "puzzle game", "save file", "speedrun route"],
        ["playing co-op with friends", "speedrunning", "collecting achievements", "streaming my games",
         "building a retro setup", "modding old games"],
    ),
    "cooking": (
        "Cooking",
        "Recipes, techniques and kitchen gear.",
        ["cast iron skillet", "sourdough starter", "chef's knife", "slow cooker", "spice rack", "stock pot",
         "rice cooker", "pasta machine", "dutch oven", "cutting board", "stand mixer", "fermented hot sauce"],
        ["meal prepping", "baking bread", "making fresh pasta", "pickling vegetables", "grilling on weekends",
         "cooking for one"],
    ),
    "diy": (
        "DIY",
        "Home repair, woodworking and fixing things yourself.",
        ["cordless drill", "workbench", "tile saw", "bathroom fan", "deck stain", "drywall patch", "miter saw",
         "garden shed", "kitchen faucet", "laminate floor", "stud finder", "paint sprayer"],
        ["refinishing furniture", "building shelves", "fixing a leaky tap", "insulating the attic",
         "painting the hallway", "wiring a light switch"],
    ),
    "science": (
        "Science",
        "Physics, biology, space and the papers behind the headlines.",
        ["telescope", "exoplanet", "microscope", "fusion reactor", "gene therapy", "black hole image",
         "lab notebook", "particle detector", "weather balloon", "coral reef survey", "mars rover", "vaccine trial"],
        ["reading preprints", "stargazing", "citizen science counts", "running home experiments",
         "teaching kids chemistry", "watching rocket launches"],
    ),
    "movies": (
        "Movies",
        "Films old and new, reviews and recommendations.",
        ["director's cut", "film score", "silent film", "documentary", "animated feature", "heist movie",
         "film festival", "projector", "horror sequel", "noir classic", "box set", "indie drama"],
        ["watching double features", "rewatching trilogies", "going to midnight screenings",
         "keeping a film diary", "hosting movie nights", "collecting posters"],
    ),
    "music": (
        "Music",
        "Albums, instruments, gear and gigs.",
        ["vinyl pressing", "acoustic guitar", "drum machine", "studio monitor", "jazz record", "synthesizer",
         "concert ticket", "bass amp", "audio interface", "ukulele", "live album", "practice pad"],
        ["practicing scales", "recording demos", "going to small gigs", "learning to read music",
         "digging through record bins", "playing in a cover band"],
    ),
    "travel": (
        "Travel",
        "Trips, routes, packing lists and travel stories.",
        ["carry-on backpack", "rail pass", "hostel", "travel adapter", "hiking trail", "night train",
         "city pass", "packing cube", "road trip route", "ferry crossing", "travel insurance", "mountain hut"],
        ["traveling solo", "packing light", "taking night trains", "hiking between villages",
         "planning a road trip", "learning basic phrases"],
    ),
    "fitness": (
        "Fitness",
        "Training plans, running, lifting and recovery.",
        ["running shoe", "kettlebell", "rowing machine", "foam roller", "pull-up bar", "heart rate monitor",
         "yoga mat", "training plan", "protein shake", "resistance band", "squat rack", "marathon bib"],
        ["running before work", "lifting three times a week", "stretching every evening",
         "training for a half marathon", "cycling to work", "swimming laps"],
    ),
    "gardening": (
        "Gardening",
        "Vegetables, houseplants, soil and seeds.",
        ["tomato plant", "compost bin", "raised bed", "seed tray", "pruning shears", "rain barrel",
         "fiddle leaf fig", "potting mix", "herb garden", "greenhouse", "drip irrigation kit", "apple tree"],
        ["starting seeds indoors", "composting kitchen scraps", "growing herbs on a balcony",
         "saving seeds", "mulching beds", "repotting houseplants"],
    ),
}

TITLE_TEMPLATES = [
    "What's the best {noun} for a beginner?",
    "Is a {noun} worth it in 2024?",
    "My first {noun}: lessons learned",
    "How do you stick with {activity}?",
    "Unpopular opinion: the {noun} is overrated",
    "Looking for advice on {activity}",
    "Finally upgraded my {noun}",
    "{Adj} {noun} recommendations?",
    "Does anyone else love {activity}?",
    "Help: my {noun} stopped working",
    "A year of {activity}, here is what changed",
    "Budget {noun} vs premium {noun2}",
    "Weekly thread: share your {noun}",
    "Tips for {activity} on a budget",
    "Why I switched from a {noun} to a {noun2}",
    "The {adj} {noun} that surprised me",
]

ADJECTIVES = ["cheap", "compact", "durable", "quiet", "classic", "lightweight", "underrated", "reliable",
              "beautiful", "versatile", "sturdy", "simple"]

BODY_OPENERS = [
    "I have been {activity} for about {n} months now and wanted to ask the community.",
    "Long time reader, first post here.",
    "Quick question for the people who know more than me.",
    "So this has been on my mind all week.",
    "My partner thinks I am overthinking this, so here we are.",
    "I searched the forum first but the old threads are from years ago.",
]

BODY_MIDDLES = [
    "I am choosing between a {adj} {noun} and a {noun2}, and the price gap is about ${price}.",
    "The {noun} I bought last spring cost ${price} and it already shows wear.",
    "A friend recommended a {adj} {noun}, but reviews are all over the place.",
    "Most guides say to start with a {noun}, yet I keep reading that a {noun2} is the smarter choice.",
    "I set aside ${price} for this and would rather buy once than twice.",
    "What surprised me most is how much {activity} depends on a good {noun}.",
    "I tried {activity} twice a week and the {noun} made a real difference.",
]

BODY_CLOSERS = [
    "Any advice is appreciated!",
    "What would you do in my place?",
    "Thanks in advance, I will post an update.",
    "Curious to hear your experiences.",
    "Please tell me I am not the only one.",
    "Links to older threads are welcome too.",
]

COMMENT_SENTENCES = [
    "I had the same problem with my {noun} and ended up returning it.",
    "Honestly, {activity} is what got me into this in the first place.",
    "Go with the {adj} one, you will not regret it.",
    "I paid ${price} for mine three years ago and it still works fine.",
    "Check the weekly thread, this comes up a lot.",
    "Hard disagree, a {noun} is the first thing I would buy.",
    "This is the best advice in the whole thread.",
    "Have you tried a {noun2} instead? It changed everything for me.",
    "Thanks for posting this, saved for later.",
    "Small tip: keep notes, it makes {activity} much easier to track.",
    "My local shop sells a {adj} {noun} for around ${price}.",
    "Patience helps more than gear, in my experience.",
    "Same here. The first month is the hardest.",
    "I would skip the {noun} and spend the money on {activity}.",
    "Update us when you decide!",
    "The cheaper {noun2} is fine for the first year.",
]

FIRST_NAMES = ["Alex", "Jordan", "Priya", "Mateo", "Hannah", "Kenji", "Olivia", "Samir", "Chloe", "Diego",
               "Fatima", "Lukas", "Maya", "Noah", "Ingrid", "Tomas", "Aisha", "Ben", "Carmen", "Dmitri",
               "Elena", "Felix", "Grace", "Hugo", "Isla", "Jonas", "Keiko", "Leo", "Mina", "Oscar",
               "Paula", "Quinn", "Rosa", "Sven", "Tara", "Uma", "Victor", "Wren", "Yusuf", "Zoe"]

LAST_NAMES = ["Rivera", "Okafor", "Lindqvist", "Tanaka", "Moreau", "Patel", "Novak", "Castillo", "Brennan",
              "Haddad", "Kowalski", "Nguyen", "Schmidt", "Delgado", "Fischer", "Osei", "Park", "Romano",
              "Svensson", "Walsh"]

USERNAME_SUFFIXES = ["reads", "plays", "cooks", "builds", "explores", "lifts", "grows", "writes", "hikes", "tinkers",
                     "bakes", "runs", "83", "_99", "_x", "42", "jr", "nyc", "_uk", "42x"]
