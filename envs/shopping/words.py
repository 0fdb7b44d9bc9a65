"""Word lists for the shopping catalog.

Hand-written (no Faker) so that the seeded data never changes when a dependency is upgraded: task answers are read
from this data, and a silent change would break every reference solution.
"""

from __future__ import annotations

FIRST_NAMES = [
    "Jordan", "Taylor", "Morgan", "Casey", "Riley", "Jamie", "Avery", "Quinn", "Harper", "Rowan",
    "Elena", "Marcus", "Priya", "Tomás", "Grace", "Wei", "Fatima", "Liam", "Noah", "Sofia",
    "Hannah", "Omar", "Chloe", "Daniel", "Isla", "Kenji", "Maya", "Lucas", "Nina", "Ethan",
]
LAST_NAMES = [
    "Chen", "Patel", "Nguyen", "Garcia", "Smith", "Okafor", "Kowalski", "Brown", "Martin", "Silva",
    "Haddad", "Johansson", "Murphy", "Rossi", "Kim", "Dubois", "Novak", "Walker", "Ibrahim", "Lopez",
]
STREETS = ["Maple Avenue", "Oak Street", "Cedar Lane", "Harbor Road", "Elm Drive", "Willow Way", "Pine Court"]
CITIES = [
    ("Portland", "OR", "972"), ("Denver", "CO", "802"), ("Austin", "TX", "787"), ("Madison", "WI", "537"),
    ("Raleigh", "NC", "276"), ("Tucson", "AZ", "857"), ("Boise", "ID", "837"), ("Albany", "NY", "122"),
]

BRANDS = [
    "Hearthstone", "Northwind", "Bluecrest", "Larkspur", "Ironleaf", "Solvana", "Kestrel", "Brightfield",
    "Oakhaven", "Tidewater", "Summit & Co", "Veloce", "Maplewood", "Quillon", "Redfern", "Alder Lane",
]
COLORS = ["Black", "White", "Slate Gray", "Navy", "Forest Green", "Crimson", "Sand", "Teal", "Charcoal", "Ivory"]

# Each category: url slug, display name, one-line description, product nouns, name modifiers, price range in
# dollars, and specs (spec name -> possible values). Brand, color and weight specs are added for every product.
CATEGORIES = [
    {
        "slug": "kitchen", "name": "Kitchen & Dining", "blurb": "Cookware, mugs, knives and small appliances.",
        "nouns": ["Coffee Mug", "Chef's Knife", "Skillet", "Electric Kettle", "Cutting Board",
                  "French Press", "Mixing Bowl Set", "Saucepan", "Tea Infuser", "Dutch Oven"],
        "modifiers": ["Ceramic", "Stainless Steel", "Classic", "Pro", "Stoneware", "Compact", "Enameled"],
        "price": (8, 180),
        "specs": {"Material": ["Ceramic", "Stainless steel", "Cast iron", "Bamboo", "Borosilicate glass"],
                  "Capacity": ["12 oz", "16 oz", "1.7 L", "2 qt", "5.5 qt", "34 oz"],
                  "Dishwasher safe": ["Yes", "No"]},
    },
    {
        "slug": "electronics", "name": "Electronics", "blurb": "Headphones, speakers, chargers and gadgets.",
        "nouns": ["Wireless Headphones", "Bluetooth Speaker", "USB-C Charger", "Power Bank", "Smart Watch",
                  "Webcam", "Mechanical Keyboard", "Wireless Mouse", "Earbuds", "E-Reader"],
        "modifiers": ["Noise-Cancelling", "Portable", "Ultra", "Mini", "Pro", "Rugged", "Slim"],
        "price": (15, 350),
        "specs": {"Battery life": ["8 hours", "12 hours", "20 hours", "30 hours", "2 days", "1 week"],
                  "Connectivity": ["Bluetooth 5.3", "USB-C", "Wi-Fi", "Bluetooth 5.0", "2.4 GHz wireless"],
                  "Warranty": ["1 year", "2 years", "90 days"]},
    },
    {
        "slug": "home", "name": "Home & Garden", "blurb": "Lamps, planters, bedding and tools for the yard.",
        "nouns": ["Table Lamp", "Ceramic Planter", "Throw Blanket", "Garden Hose", "Pruning Shears",
                  "Wall Clock", "Scented Candle", "Bath Towel Set", "Doormat", "Bird Feeder"],
        "modifiers": ["Rustic", "Modern", "Handwoven", "Weatherproof", "Vintage", "Minimalist", "Cozy"],
        "price": (10, 140),
        "specs": {"Material": ["Cotton", "Linen", "Ceramic", "Steel", "Recycled plastic", "Wool"],
                  "Dimensions": ["10 x 10 x 12 in", "50 x 60 in", "25 ft", "14 in diameter", "18 x 30 in"],
                  "Indoor/outdoor": ["Indoor", "Outdoor", "Both"]},
    },
    {
        "slug": "office", "name": "Office Supplies", "blurb": "Notebooks, pens, desk organizers and chairs.",
        "nouns": ["Notebook", "Gel Pen Set", "Desk Organizer", "Stapler", "Desk Lamp", "Ergonomic Chair",
                  "Whiteboard", "Monitor Stand", "Sticky Notes", "File Cabinet"],
        "modifiers": ["Dotted", "Executive", "Recycled", "Heavy-Duty", "Adjustable", "Premium", "Everyday"],
        "price": (4, 260),
        "specs": {"Pack size": ["1", "3", "5", "12", "24"],
                  "Paper/finish": ["Matte", "Glossy", "Dotted grid", "Lined", "Brushed metal"],
                  "Recycled content": ["0%", "30%", "50%", "100%"]},
    },
    {
        "slug": "sports", "name": "Sports & Outdoors", "blurb": "Gear for hiking, camping, cycling and the gym.",
        "nouns": ["Yoga Mat", "Water Bottle", "Camping Tent", "Hiking Backpack", "Resistance Bands",
                  "Bike Helmet", "Trekking Poles", "Sleeping Bag", "Jump Rope", "Dumbbell Pair"],
        "modifiers": ["Lightweight", "Insulated", "Trail", "Ultralight", "All-Season", "Foldable", "Grip"],
        "price": (9, 320),
        "specs": {"Material": ["Nylon", "TPE foam", "Aluminum", "Stainless steel", "Polyester"],
                  "Capacity": ["24 oz", "32 oz", "2-person", "40 L", "20 F rated", "15 lb each"],
                  "Water resistant": ["Yes", "No"]},
    },
    {
        "slug": "beauty", "name": "Beauty & Personal Care", "blurb": "Skin care, hair care and grooming.",
        "nouns": ["Face Moisturizer", "Shampoo", "Electric Toothbrush", "Hair Dryer", "Lip Balm Set",
                  "Sunscreen SPF 50", "Beard Trimmer", "Body Lotion", "Hand Cream", "Makeup Brush Set"],
        "modifiers": ["Gentle", "Hydrating", "Travel", "Fragrance-Free", "Daily", "Sensitive", "Herbal"],
        "price": (5, 120),
        "specs": {"Volume": ["1.7 oz", "8 oz", "12 oz", "16 oz", "N/A"],
                  "Skin type": ["All", "Dry", "Oily", "Sensitive"],
                  "Cruelty free": ["Yes", "No"]},
    },
    {
        "slug": "toys", "name": "Toys & Games", "blurb": "Board games, puzzles and building sets.",
        "nouns": ["Jigsaw Puzzle", "Board Game", "Building Blocks Set", "Card Game", "Plush Bear",
                  "Remote Control Car", "Wooden Train Set", "Science Kit", "Chess Set", "Kite"],
        "modifiers": ["Family", "Classic", "Deluxe", "Junior", "Strategy", "Travel", "Collector's"],
        "price": (7, 90),
        "specs": {"Age range": ["3+", "6+", "8+", "12+", "Adult"],
                  "Players": ["1", "2", "2-4", "2-6", "1-8"],
                  "Pieces": ["32", "100", "500", "1000", "250"]},
    },
    {
        "slug": "books", "name": "Books", "blurb": "Cookbooks, guides, novels and field manuals.",
        "nouns": ["Cookbook", "Field Guide", "Mystery Novel", "Travel Guide", "Poetry Collection",
                  "History of Maps", "Gardening Handbook", "Science Fiction Novel", "Biography", "Puzzle Book"],
        "modifiers": ["Illustrated", "Hardcover", "Paperback", "Annotated", "Pocket", "Collected", "Revised"],
        "price": (6, 55),
        "specs": {"Format": ["Hardcover", "Paperback", "Spiral-bound"],
                  "Pages": ["160", "224", "312", "408", "520"],
                  "Language": ["English", "English", "Spanish", "French"]},
    },
    {
        "slug": "pets", "name": "Pet Supplies", "blurb": "Beds, toys, bowls and leashes for pets.",
        "nouns": ["Dog Bed", "Cat Scratcher", "Pet Bowl", "Leash", "Chew Toy", "Litter Box", "Pet Carrier",
                  "Grooming Brush", "Aquarium Filter", "Bird Cage"],
        "modifiers": ["Orthopedic", "Durable", "Non-Slip", "Reflective", "Washable", "Calming", "Large"],
        "price": (6, 150),
        "specs": {"Pet size": ["Small", "Medium", "Large", "All sizes"],
                  "Material": ["Memory foam", "Rubber", "Stainless steel", "Sisal", "Nylon"],
                  "Machine washable": ["Yes", "No"]},
    },
    {
        "slug": "clothing", "name": "Clothing", "blurb": "Jackets, shirts, socks and rain gear.",
        "nouns": ["Rain Jacket", "Wool Socks", "Flannel Shirt", "Fleece Pullover", "Beanie", "Chino Pants",
                  "Running Shorts", "Down Vest", "Cotton T-Shirt", "Leather Gloves"],
        "modifiers": ["Packable", "Merino", "Relaxed Fit", "Slim Fit", "Thermal", "Organic", "Stretch"],
        "price": (9, 210),
        "specs": {"Sizes": ["S-XL", "XS-XXL", "One size", "M-XXL"],
                  "Fabric": ["Merino wool", "Organic cotton", "Recycled polyester", "Nylon", "Leather"],
                  "Care": ["Machine wash", "Hand wash", "Dry clean"]},
    },
]

DESCRIPTION_OPENERS = [
    "Built for everyday use, the {name} balances quality and value.",
    "The {name} is one of our customers' favorite picks in {category}.",
    "Designed by {brand}, the {name} keeps things simple and reliable.",
    "Meet the {name}: a thoughtful take on a classic.",
]
DESCRIPTION_MIDDLES = [
    "It comes in {color} and is made to last through years of regular use.",
    "Its {color} finish fits in almost anywhere, and it cleans up easily.",
    "Reviewers praise the sturdy build and the {color} color.",
    "Every unit is inspected before shipping and packed in recyclable material.",
]
DESCRIPTION_CLOSERS = [
    "Backed by the {brand} satisfaction guarantee.",
    "Ships within two business days.",
    "A great gift for friends and family.",
    "Free returns within 30 days.",
]

REVIEW_TITLES = {
    5: ["Exactly what I wanted", "Love it", "Excellent quality", "Five stars, no complaints", "Would buy again"],
    4: ["Very good", "Solid purchase", "Good value", "Happy with it", "Nearly perfect"],
    3: ["It's okay", "Average", "Does the job", "Mixed feelings", "Fine for the price"],
    2: ["Disappointed", "Not great", "Below expectations", "Meh", "Could be better"],
    1: ["Broke quickly", "Do not buy", "Returned it", "Very poor", "Not as described"],
}
REVIEW_BODIES = {
    5: ["Arrived fast and works perfectly. The {noun} feels premium.",
        "I use this {noun} every day and it still looks new.",
        "Better than the one I had before. Highly recommended."],
    4: ["Good {noun} overall; the color is a bit darker than in the photos.",
        "Works well. Packaging could be better but the product is great.",
        "Nice {noun}, slightly smaller than I expected."],
    3: ["The {noun} is fine, nothing special.", "Does what it says, but the finish scratches easily.",
        "Okay for occasional use."],
    2: ["The {noun} stopped working properly after a month.", "Cheaper feel than the price suggests.",
        "Instructions were confusing and one part was missing."],
    1: ["Arrived damaged and support was slow to answer.", "The {noun} fell apart within a week.",
        "Nothing like the description. Sent it back."],
}
