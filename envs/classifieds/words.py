"""Word lists for the classifieds seed data.

Hand-written rather than Faker so that the same seed yields byte-identical data across library versions.
Each category lists items as (title stem, low price, high price) in whole dollars, plus the phrases used to write
plausible descriptions.
"""

from __future__ import annotations

FIRST_NAMES = [
    "Jordan", "Morgan", "Taylor", "Casey", "Riley", "Jamie", "Avery", "Quinn", "Drew", "Parker",
    "Hayden", "Reese", "Cameron", "Dana", "Emerson", "Finley", "Harper", "Kendall", "Logan", "Sage",
    "Rowan", "Skyler", "Blake", "Devon", "Elliot", "Frankie", "Marley", "Noel", "Peyton", "Shawn",
]
LAST_NAMES = [
    "Nguyen", "Patel", "Okafor", "Schmidt", "Kowalski", "Haddad", "Fernandez", "Lindqvist", "Moreau", "Tanaka",
    "Brennan", "Castillo", "Delgado", "Eriksen", "Gallagher", "Hoffman", "Ivanova", "Jensen", "Kaur", "Larsen",
    "Mbeki", "Novak", "O'Neill", "Petrov", "Rossi", "Sato", "Turner", "Vargas", "Whitaker", "Yilmaz",
]

LOCATIONS = [
    "Riverside", "Oakridge", "Maple Heights", "Lakeview", "Downtown", "Hillcrest", "Brookfield", "Cedar Park",
    "Westgate", "Harbor Point", "Pine Valley", "Elmwood",
]

CONDITIONS = ["New", "Like new", "Good", "Fair", "For parts"]

COLOURS = ["white", "black", "silver", "grey", "blue", "red", "green", "beige"]

# slug, display name, noun used in listing counts
CATEGORIES = [
    ("vehicles", "Vehicles"),
    ("electronics", "Electronics"),
    ("furniture", "Furniture"),
    ("housing", "Housing"),
    ("jobs", "Jobs"),
    ("sports", "Sports & Outdoors"),
    ("music", "Musical Instruments"),
    ("appliances", "Appliances"),
]

CAR_MODELS = {
    "Honda": ["Civic", "Accord", "CR-V", "Fit", "Odyssey"],
    "Toyota": ["Corolla", "Camry", "RAV4", "Tacoma", "Prius"],
    "Ford": ["F-150", "Focus", "Escape", "Mustang", "Fusion"],
    "Subaru": ["Outback", "Forester", "Impreza", "Crosstrek"],
    "Mazda": ["Mazda3", "CX-5", "MX-5 Miata"],
    "Volkswagen": ["Golf", "Jetta", "Passat", "Tiguan"],
    "Chevrolet": ["Malibu", "Silverado", "Equinox", "Bolt EV"],
    "Hyundai": ["Elantra", "Tucson", "Sonata", "Kona"],
}
CAR_TRIMS = ["LX", "EX", "SE", "Sport", "Limited", "Touring", "Base", "XLE", "Premium"]
CAR_NOTES = [
    "New tires last spring.", "Clean title, no accidents.", "Timing belt replaced at 90k.",
    "Minor scratch on the rear bumper.", "Always garage kept.", "Recent oil change and new brakes.",
    "Two sets of keys included.", "Bluetooth stereo and backup camera.", "Small dent on the driver door.",
    "Passed inspection this year.",
]

ELECTRONICS = [
    ("Canon EOS Rebel T7 camera", 250, 450), ("Nikon D3500 camera", 280, 420), ("Sony a6000 camera", 300, 520),
    ("Fujifilm X-T30 camera", 550, 800), ("Dell XPS 13 laptop", 450, 900), ("Lenovo ThinkPad T480 laptop", 220, 420),
    ("Apple MacBook Air M1 laptop", 550, 800), ("HP Pavilion 15 laptop", 200, 420), ("ASUS ZenBook 14 laptop", 350, 650),
    ("iPhone 12", 260, 420), ("iPhone 13", 380, 560), ("Google Pixel 7", 280, 450), ("Samsung Galaxy S21", 240, 400),
    ("Samsung 55-inch 4K TV", 280, 520), ("LG 65-inch OLED TV", 800, 1400), ("Sony WH-1000XM4 headphones", 140, 240),
    ("Bose QuietComfort 35 headphones", 100, 190), ("PlayStation 5 console", 350, 480),
    ("Xbox Series S console", 180, 260), ("Nintendo Switch OLED", 230, 320), ("Dell 27-inch monitor", 110, 240),
    ("iPad Air 4th generation", 300, 450), ("Kindle Paperwhite", 60, 110), ("GoPro HERO9", 150, 260),
]
ELECTRONICS_EXTRAS = [
    "with charger", "with original box", "with case", "with two batteries", "with 64GB card", "bundle",
    "with stand", "with remote", "barely used", "with spare cable",
]
ELECTRONICS_NOTES = [
    "Battery health is still excellent.", "Screen has no scratches.", "Factory reset and ready to go.",
    "Upgrading, so this one has to go.", "Works perfectly, small scuff on the corner.", "Receipt available.",
    "Comes with everything shown.", "Firmware updated last month.",
]

# (item, low, high, upholstered): upholstered items take fabric materials, the rest wood or metal
FURNITURE_ITEMS = [
    ("sofa", 150, 900, True), ("sectional couch", 300, 1200, True), ("dining table", 120, 800, False),
    ("bookshelf", 30, 220, False), ("writing desk", 60, 350, False), ("office chair", 40, 280, True),
    ("dresser", 80, 450, False), ("queen bed frame", 90, 500, False), ("coffee table", 40, 300, False),
    ("armchair", 60, 400, True), ("TV stand", 40, 200, False), ("nightstand", 25, 140, False),
]
FABRICS = ["leather", "velvet", "linen", "tweed", "corduroy"]
WOODS = ["oak", "walnut", "pine", "steel", "teak", "birch", "rattan", "maple"]
FURNITURE_EXTRAS = ["", "", "mid-century style", "moving sale", "(IKEA)", "handmade", "solid build", "must go"]
FURNITURE_NOTES = [
    "Smoke-free, pet-free home.", "Some wear on the legs, otherwise solid.", "Must pick up; no delivery.",
    "Disassembles for transport.", "Bought two years ago, moving out.", "Cushions recently cleaned.",
    "Measurements in the photos.", "Sturdy and heavy.",
]

HOUSING_TYPES = [("studio", 700, 1300), ("apartment", 900, 2400), ("condo", 1200, 2600), ("townhouse", 1500, 3000),
                 ("house", 1700, 3600), ("room in shared house", 500, 950)]
HOUSING_FEATURES = [
    "in-unit laundry", "off-street parking", "a balcony", "a fenced yard", "hardwood floors",
    "a renovated kitchen", "central air", "a shared garden", "a dishwasher", "a walk-in closet",
]
HOUSING_NOTES = ["Cats welcome.", "No pets please.", "Small dogs allowed.", "Utilities included.",
                 "Tenant pays utilities.", "12-month lease.", "Month-to-month available."]

JOB_ROLES = [
    ("Barista", 15, 20), ("Line cook", 17, 24), ("Delivery driver", 18, 26), ("Dog walker", 16, 24),
    ("Math tutor", 25, 45), ("Warehouse associate", 17, 23), ("Receptionist", 16, 22), ("Web developer", 35, 65),
    ("Bookkeeper", 24, 38), ("Landscaper", 18, 27), ("Cashier", 15, 19), ("House painter", 20, 32),
    ("Bike mechanic", 19, 28), ("Photographer assistant", 18, 30),
]
JOB_BUSINESSES = [
    "Bean There Cafe", "Harbor Grill", "Quickstop Deliveries", "Happy Paws", "Bright Minds Tutoring",
    "Northside Logistics", "Elmwood Dental", "Pixel Forge Studio", "Greenleaf Gardens", "Corner Market",
    "Fresh Coat Painting", "Spoke & Chain Cycles", "Lakeside Books", "Summit Accounting",
]
JOB_SCHEDULES = ["full-time", "part-time", "weekends", "evenings", "seasonal", "flexible hours"]

SPORTS_ITEMS = [
    ("Trek FX 3 hybrid bike", 350, 700), ("Specialized Rockhopper mountain bike", 300, 650),
    ("kids bike 20-inch", 40, 120), ("sit-on-top kayak", 250, 600), ("Burton snowboard", 120, 320),
    ("Rossignol skis with bindings", 150, 380), ("NordicTrack treadmill", 300, 900),
    ("adjustable dumbbells set", 120, 320), ("Callaway golf club set", 200, 550), ("4-person camping tent", 60, 180),
    ("Wilson tennis racket", 30, 110), ("stand-up paddle board", 250, 550), ("climbing shoes size 42", 30, 90),
    ("yoga mat and blocks", 15, 50),
]
MUSIC_ITEMS = [
    ("Fender Stratocaster electric guitar", 450, 900), ("Yamaha FG800 acoustic guitar", 120, 220),
    ("Gibson Les Paul Studio guitar", 800, 1400), ("Roland FP-30 digital piano", 400, 650),
    ("Casio 61-key keyboard", 60, 150), ("Pearl 5-piece drum kit", 300, 700), ("Fender Rumble 40 bass amp", 120, 220),
    ("Boss Katana 50 guitar amp", 140, 240), ("full-size violin", 120, 450), ("concert ukulele", 40, 120),
    ("Shure SM58 microphone", 60, 100), ("Yamaha alto saxophone", 600, 1300),
]
APPLIANCE_ITEMS = [
    ("Whirlpool washing machine", 200, 550), ("LG electric dryer", 200, 500), ("Samsung French-door fridge", 600, 1400),
    ("GE microwave", 40, 120), ("Bosch dishwasher", 250, 600), ("KitchenAid stand mixer", 150, 330),
    ("Dyson V8 cordless vacuum", 120, 250), ("Frigidaire window air conditioner", 90, 260),
    ("Breville espresso machine", 250, 550), ("Instant Pot 6-quart", 40, 90), ("chest freezer", 120, 320),
]
GOODS_EXTRAS = ["", "", "barely used", "with extras", "(black)", "(white)", "(blue)", "hardly used"]
GOODS_NOTES = [
    "Works great, just upgraded.", "Cleaned and tested.", "Selling because we are moving.",
    "Light cosmetic wear only.", "Manual included.", "Needs a small repair, priced to sell.",
    "Cash or bank transfer.",
]

CLOSINGS = [
    "Pickup in {location}.", "Can meet near {location}.", "Serious buyers only, please.",
    "Price is firm.", "Open to reasonable offers.", "First come, first served.",
]

BUYER_OPENERS = [
    "Hi, I saw your {title}.", "Hello! I'm interested in your {title}.",
    "Hey, saw your listing for the {title}.",
]
# buyer question and the seller's matching answer
QUESTIONS_AND_ANSWERS = [
    ("Could I come see it this weekend?", "Sure, Saturday morning works for me."),
    ("Is the price negotiable?", "A little, make me an offer."),
    ("Any issues I should know about?", "It's in good shape, no issues."),
    ("Can you deliver?", "Sorry, I can't deliver, pickup only."),
    ("How old is it?", "About three years old."),
    ("Is it still available?", "Yes, it's still available."),
]
MEETING_SPOTS = ["the library parking lot", "the Elmwood train station", "Cedar Park community center",
                 "the Harbor Point ferry terminal", "the Riverside farmers market"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
