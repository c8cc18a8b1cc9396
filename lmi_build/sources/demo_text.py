"""Built-in text the demo tokenizers are trained on (and a handy sample for demo prompts).

Plain English plus some numbers, code and punctuation, so byte-level BPE learns useful merges.
Changing it changes every demo model's tokenizer: bump ``demo.GENERATOR_VERSION`` if you do."""

from __future__ import annotations

CORPUS = """\
The quick brown fox jumps over the lazy dog while the patient cat watches from the window.
A large language model reads a prompt, splits it into tokens, and predicts the next token again and again.
Engineers compile models ahead of time so that servers start in seconds instead of minutes.
The container downloads the weights, loads the tokenizer, and answers requests on port 8080.
Every artifact carries a manifest with the size and checksum of each file it contains.
When an upload is interrupted, the next run finds what is already there and finishes the rest.
Hello, world! How are you today? I am fine, thank you, and the weather is lovely.
Once upon a time there was a small robot who wanted to learn how to paint the sea.
The robot mixed blue and green, then white for the foam, and painted all through the night.
In the morning the harbour was quiet, the boats were still, and the gulls were singing.
Tensor parallelism splits each matrix across several devices; pipeline parallelism splits the layers.
Quantization stores weights with fewer bits: eight bits for integers, four bits for groups of weights.
Calibration runs a few hundred sentences through the network to measure the range of activations.
Attention lets every position look at every earlier position and decide what matters most.
Grouped query attention shares one key and value head among several query heads to save memory.
Rotary position embeddings rotate pairs of dimensions by an angle that grows with the position.
The key value cache keeps past keys and values so that each new token costs only one step.
def add(a, b):
    return a + b

for index in range(10):
    print(index * index)

{"name": "example", "values": [1, 2, 3], "enabled": true}
SELECT id, name FROM users WHERE active = 1 ORDER BY name;
https://example.com/docs/getting-started?lang=en#install
Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 256 512 1024 2048 4096 8192 3.14159 2.71828
Dates like 2024-01-31 and times like 12:30:45 appear in logs next to levels such as INFO and ERROR.
She sells sea shells by the sea shore, and the shells she sells are surely sea shells.
Peter Piper picked a peck of pickled peppers; where is the peck of pickled peppers Peter Piper picked?
The library opens at nine and closes at six, except on Sundays when it stays closed all day.
Mountains rise above the valley, rivers run toward the ocean, and forests cover the hills.
Bread, butter, cheese, apples, oranges, coffee, tea, milk, sugar, salt, pepper, and honey.
Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, Sunday; January, February, March, April.
Red, orange, yellow, green, blue, indigo, violet: the colours of the rainbow in their order.
One, two, three, four, five, six, seven, eight, nine, ten, eleven, twelve, twenty, hundred, thousand.
Please summarize the following article in three sentences and list the main points.
Translate the sentence into French: the train leaves the station at seven in the evening.
Write a short poem about autumn leaves falling softly on a quiet street.
What is the capital of France? The capital of France is Paris.
What is two plus two? Two plus two is four.
Explain why the sky is blue: sunlight scatters off molecules, and blue light scatters the most.
Good software is tested, documented, and easy to change; great software is also pleasant to use.
The server logged a warning, retried the request, and succeeded on the second attempt.
Checksums detect corruption; signatures detect tampering; both are cheap compared with a bad deploy.
Keep the build reproducible: pin versions, record inputs, and hash everything that matters.
The quick brown fox jumps over the lazy dog.
"""
