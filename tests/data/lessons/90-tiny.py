# A lesson source for tests/test_build.py: it goes through the same build as the lessons, has each
# kind of output that made rebuilt lessons differ from run to run, and takes a second to run.

# %% [markdown] tags=["en"]
# # A lesson for the build's tests

# %% [markdown] tags=["ru"]
# # Урок для тестов сборки

# %%
# Each run adds a line to runs.log beside the notebook: the tests count the runs by it.
with open("runs.log", "a") as log:
    log.write("run\n")

# %% tags=["nbval-check-output"]
print(sum(range(10)))

# %%
# A figure, as the lessons' timelines are.
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(3, 2))
ax.plot([0, 1, 2], [0, 1, 4])
fig

# %%
# A dashboard-like widget (random model ids) whose header names a scratch folder (random name).
import ipywidgets

from leaselab import lessons

work = lessons.scratch("90-tiny")
ipywidgets.VBox([ipywidgets.HTML(f"<h3 title='{work / 'tiny.db'}'>tiny</h3>"), ipywidgets.IntSlider(3)])

# %%
print(lessons.cleanup(work))
