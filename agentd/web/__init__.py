"""The web page ``agentd serve`` shows at ``/``: plain HTML, CSS and JavaScript, no build
step and nothing fetched from elsewhere. These files are package data (a built wheel
carries them); :mod:`agentd.api.web` serves them."""
