"""The interactive dashboard: Bokeh views and ipywidgets controls over one Profile.

The only package that imports Bokeh, ipywidgets and jupyter_bokeh; ``data`` holds the
pure-pandas view data, ``views`` the Bokeh figures, ``dashboard`` the widget.
"""
