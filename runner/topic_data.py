"""The built-in `topics` task's data, written for this project (not from any data set).

Each row: (sentence, topic, clue). The clue is the word or phrase that gives
the topic away; the metric's feedback names it so the reflection LM has
something concrete to turn into a hint. Rows alternate topics so a split
taken as a slice stays balanced.
"""

TOPICS = ("sports", "food", "weather", "music")

ROWS: tuple[tuple[str, str, str], ...] = (
    # train: 24 rows, 6 per topic
    ("The striker scored twice before halftime.", "sports", "striker, scored"),
    ("She kneaded the dough and let it rise overnight.", "food", "dough"),
    ("Heavy snow closed the mountain pass this morning.", "weather", "snow"),
    ("The guitarist tuned his strings before the encore.", "music", "guitarist, encore"),
    ("Our team lost the final on penalties.", "sports", "team, final, penalties"),
    ("Add a pinch of salt to the boiling pasta.", "food", "salt, pasta"),
    ("A warm front will bring drizzle by noon.", "weather", "warm front, drizzle"),
    ("The choir sang the hymn in four-part harmony.", "music", "choir, harmony"),
    ("He ran the marathon in under three hours.", "sports", "marathon"),
    ("The soup needs more garlic and a little lemon.", "food", "soup, garlic"),
    ("Gusts of wind knocked over the garden chairs.", "weather", "gusts of wind"),
    ("Her new album has twelve songs and a piano ballad.", "music", "album, songs"),
    ("The goalkeeper dived and saved the shot.", "sports", "goalkeeper"),
    ("They grilled fish with rosemary for dinner.", "food", "grilled fish, dinner"),
    ("Thunder rolled across the valley all night.", "weather", "thunder"),
    ("The drummer kept a steady beat through the solo.", "music", "drummer, beat"),
    ("She served an ace to win the set.", "sports", "ace, set"),
    ("The bakery sells warm croissants at dawn.", "food", "croissants"),
    ("Fog made the harbor invisible from the shore.", "weather", "fog"),
    ("The orchestra rehearsed the symphony for hours.", "music", "orchestra, symphony"),
    ("The coach called a timeout with ten seconds left.", "sports", "coach, timeout"),
    ("Slice the onions thin and fry them until golden.", "food", "onions, fry"),
    ("Temperatures will drop below freezing tonight.", "weather", "temperatures, freezing"),
    ("He hummed the melody until he found the chords.", "music", "melody, chords"),
    # val: 8 rows, 2 per topic
    ("The referee showed a red card in the second half.", "sports", "referee, red card"),
    ("Whisk the eggs with sugar until pale.", "food", "eggs, sugar"),
    ("It has not rained here for six weeks.", "weather", "rained"),
    ("The violinist played the sonata from memory.", "music", "violinist, sonata"),
    ("The cyclists climbed the last hill in a pack.", "sports", "cyclists"),
    ("A bowl of rice with spicy beans makes a fine lunch.", "food", "rice, lunch"),
    ("Clear skies and a light breeze are expected tomorrow.", "weather", "clear skies, breeze"),
    ("The band's singer forgot the lyrics of the chorus.", "music", "singer, lyrics, chorus"),
    # test: 16 rows, 4 per topic
    ("The swimmer touched the wall first by a fingertip.", "sports", "swimmer"),
    ("Roast the carrots with honey and thyme.", "food", "roast, carrots"),
    ("Hailstones the size of marbles dented the cars.", "weather", "hailstones"),
    ("The jazz trio improvised for twenty minutes.", "music", "jazz, improvised"),
    ("Both boxers were tired by the final round.", "sports", "boxers, round"),
    ("The cheese platter came with grapes and crackers.", "food", "cheese, crackers"),
    ("A heat wave is pushing the city past forty degrees.", "weather", "heat wave, degrees"),
    ("The conductor raised her baton and the strings began.", "music", "conductor, baton"),
    ("He sank the putt to win the tournament.", "sports", "putt, tournament"),
    ("The stew simmered for hours with beef and potatoes.", "food", "stew, beef"),
    ("Strong winds and rain will sweep in from the west.", "weather", "winds, rain"),
    ("The pianist closed the concert with a waltz.", "music", "pianist, concert"),
    ("The relay team passed the baton cleanly.", "sports", "relay team"),
    ("Freshly squeezed orange juice goes well with pancakes.", "food", "juice, pancakes"),
    ("The forecast says sunshine after a cloudy morning.", "weather", "forecast, sunshine"),
    ("The DJ mixed two tracks into one long song.", "music", "DJ, tracks"),
)

SPLITS = {"train": (0, 24), "val": (24, 32), "test": (32, 48)}
